"""PyTorch's half of bench/train_step.sh: the IMDb recipe's model written in PyTorch, started from
the weights Ember saved (train_step_bench --write-init) and fed the same batches, timed the same
way as bench/train_step_bench.cpp. Prints one JSON object.

Usage: train_step_torch.py --init FILE [--heads H] [--threads N] [--steps S] [--warmup W]
                           [--batches FILE] [--run-steps N] [--device cpu|cuda] [--compile]
                           [--compile-mode default|reduce-overhead|max-autotune] [--precision fp32|bf16]
--compile: torch.compile(model) at its default mode; --compile-mode MODE (implies --compile) another:
max-autotune searches Triton and cuBLAS kernels for every product and runs the step as CUDA graphs
(PyTorch at its fastest, and its slowest to start: minutes of tuning). TF32 is off for both eager and
compiled runs (torch.backends.cuda.matmul.allow_tf32 and cudnn's, set before compiling, so that
Inductor's generated products do not use it either), as Ember computes float32 products exactly.
--precision bf16: forward and loss under torch.autocast(dtype=torch.bfloat16) (PyTorch's mixed precision:
bfloat16 GEMMs, float32 weights and optimiser), like Ember's --precision bf16.
(--device cuda needs a CUDA build of torch: bench/gpu-check.sh checks torch.cuda.is_available() first.)
"""
import argparse
import json
import math
import resource
import statistics
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_}


def load_safetensors(path):
    """The safetensors format read by hand: 8-byte little-endian header length, JSON, raw data."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    body = memoryview(data)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name] = torch.from_numpy(array.copy())
    return tensors


class Attention(nn.Module):
    """Fused QKV projection, h heads, key-padding mask; the scores are scaled after q k^T, as in Ember."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, padding):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores.masked_fill(padding.view(B, 1, 1, T), float("-inf"))
        merged = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(merged)


class Block(nn.Module):
    def __init__(self, dim, heads, ffn, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = Attention(dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, padding):
        x = x + self.drop1(self.attention(self.ln1(x), padding))
        return x + self.drop2(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class Classifier(nn.Module):
    def __init__(self, vocab=20002, max_len=256, dim=128, heads=4, layers=2, ffn=512, classes=2, dropout=0.1):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.position_embedding = nn.Embedding(max_len, dim)
        self.embedding_dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn, dropout) for _ in range(layers))
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens, padding):
        B, T = tokens.shape
        positions = torch.arange(T, device=tokens.device).view(1, T)
        x = self.embedding_dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x, padding)
        x = self.final_norm(x)
        keep = (~padding).to(x.dtype)
        pooled = (x * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
        return self.head(pooled)


def make_trainee(heads, init, device=torch.device("cpu"), compile_mode=None):
    model = Classifier(heads=heads)
    state = {name[len("model.") :]: t for name, t in init.items() if name.startswith("model.")}
    model.load_state_dict(state, strict=True)
    model.to(device)
    # The recipe's groups: weight matrices decay, biases, LayerNorm and embeddings do not.
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embedding" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embedding" not in n)]
    # On a GPU, AdamW as PyTorch picks it by default (its multi-tensor foreach path, or fused where
    # that is its default): PyTorch at its best there. On the CPU the plain loop (foreach=False).
    foreach = None if device.type == "cuda" else False
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=5e-4, foreach=foreach
    )
    if compile_mode is not None:  # torch.compile (PyTorch 2): the caller checks it exists and catches its failures
        model = torch.compile(model) if compile_mode == "default" else torch.compile(model, mode=compile_mode)
    return model, optimizer


AUTOCAST = {"enabled": False}
CUDA_GRAPHS = {"enabled": False}  # torch.compile's max-autotune and reduce-overhead modes replay CUDA graphs


def forward(model, tokens, padding):
    """The model under autocast when --precision bf16 (the logits back in float32 for the loss)."""
    with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16, enabled=AUTOCAST["enabled"]):
        return model(tokens, padding).float()


def step(model, optimizer, tokens, padding, labels):
    if CUDA_GRAPHS["enabled"]:  # a new step: the previous replay's outputs may be overwritten
        torch.compiler.cudagraph_mark_step_begin()
    loss = F.cross_entropy(forward(model, tokens, padding), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", required=True)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batches")
    parser.add_argument("--run-steps", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2; an error otherwise)")
    parser.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"],
                        help="torch.compile's mode (implies --compile; default: default)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = parser.parse_args()
    compile_mode = args.compile_mode or ("default" if args.compile else None)
    if compile_mode is not None and not hasattr(torch, "compile"):
        raise SystemExit(f"--compile: torch {torch.__version__} has no torch.compile")
    AUTOCAST["enabled"] = args.precision == "bf16"
    CUDA_GRAPHS["enabled"] = compile_mode in ("max-autotune", "reduce-overhead") and hasattr(
        torch.compiler, "cudagraph_mark_step_begin"
    )
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    def sync():  # CUDA work is asynchronous: wait before reading the clock
        if cuda:
            torch.cuda.synchronize(device)

    if cuda:  # like Ember: exact float32 products; set before compiling, which reads them
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    init = load_safetensors(args.init)
    tokens, labels = init["batch.tokens"].to(device), init["batch.labels"].to(device)
    padding = torch.zeros(tokens.shape, dtype=torch.bool, device=device)
    model, optimizer = make_trainee(args.heads, init, device, compile_mode)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    start_s, warmup_s = time.perf_counter(), 0.0  # to the last warm-up step: for a compiled model, its compilation and tuning
    model.eval()
    with torch.no_grad():
        first_loss = F.cross_entropy(forward(model, tokens, padding), labels).item()

    model.train()
    step_ms, step_cpu_ms = [], []
    for i in range(args.warmup + args.steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        step(model, optimizer, tokens, padding, labels)
        sync()
        if i + 1 == args.warmup:
            warmup_s = time.perf_counter() - start_s
        if i >= args.warmup:
            step_ms.append(1e3 * (time.perf_counter() - start))
            step_cpu_ms.append(1e3 * (time.process_time() - cpu_start))
    model.eval()
    forward_ms = []
    with torch.no_grad():
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            forward(model, tokens, padding)
            sync()
            if i >= args.warmup:
                forward_ms.append(1e3 * (time.perf_counter() - start))

    run_steps, run_seconds, run_tokens_per_s, run_last_loss = 0, 0.0, 0.0, 0.0
    if args.batches and args.run_steps > 0:
        batches = load_safetensors(args.batches)
        model, optimizer = make_trainee(args.heads, init, device, compile_mode)
        model.train()
        real_tokens = 0
        start = time.perf_counter()
        while run_steps < args.run_steps and f"{run_steps}.tokens" in batches:
            i = str(run_steps)
            mask = batches[i + ".mask"].to(device)
            run_last_loss = step(model, optimizer, batches[i + ".tokens"].to(device), mask, batches[i + ".labels"].to(device))
            real_tokens += int((~mask).sum())
            run_steps += 1
        run_seconds = time.perf_counter() - start
        run_tokens_per_s = real_tokens / run_seconds

    print(
        json.dumps(
            {
                "framework": "torch",
                "precision": args.precision,
                "torch": torch.__version__,
                "compiled": compile_mode is not None,
                "compile_mode": compile_mode or "eager",
                "tf32": (torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32) if cuda else "n/a (cpu)",
                "warmup_s": round(warmup_s, 2),
                "adamw": "default (foreach/fused as PyTorch picks)" if cuda else "foreach=False",
                "heads": args.heads,
                "threads": torch.get_num_threads(),
                "first_loss": first_loss,
                "step_ms": statistics.median(step_ms),
                "step_ms_all": [round(x, 2) for x in step_ms],
                "step_cpu_ms": statistics.median(step_cpu_ms),
                "forward_ms": statistics.median(forward_ms),
                "run_steps": run_steps,
                "run_seconds": run_seconds,
                "run_tokens_per_s": run_tokens_per_s,
                "run_last_loss": run_last_loss,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "device": str(device),
                "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
            }
        )
    )


if __name__ == "__main__":
    main()
