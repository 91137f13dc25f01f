"""PyTorch's half of bench/long.sh: training steps of the IMDb recipe's model (bench/train_step_torch.py's
Classifier) on B reviews of T real tokens, full attention (PyTorch 1.13 has no sliding window on the CPU),
optionally with torch.utils.checkpoint per block. Prints one JSON line like bench/long_bench.cpp: the
median step time and the peak RSS (PyTorch's CPU allocator keeps no statistics: the RSS the step added to
what the process held before it is the nearest measure of its tensors).

Usage: long_torch.py --len T --batch B [--checkpoint] [--steps S] [--warmup W] [--threads N]
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from train_step_torch import Classifier


def rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--len", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Classifier(max_len=args.len)
    model.train()
    if args.checkpoint:
        for block in model.blocks:
            forward = block.forward
            block.forward = lambda x, padding, forward=forward: torch.utils.checkpoint.checkpoint(
                forward, x, padding, use_reentrant=False)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embedding" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embedding" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=5e-4)
    tokens = torch.randint(2, 20002, (args.batch, args.len))
    padding = torch.zeros(args.batch, args.len, dtype=torch.bool)
    labels = torch.arange(args.batch) % 2
    rss_before = rss_bytes()
    times = []
    for s in range(args.warmup + args.steps):
        start = time.perf_counter()
        loss = F.cross_entropy(model(tokens, padding), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss.item()
        if s >= args.warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"framework": "torch", "len": args.len, "batch": args.batch, "attention": "full",
                      "checkpoint": args.checkpoint, "step_s": round(statistics.median(times), 4),
                      "step_rss_bytes": rss_bytes() - rss_before, "peak_rss_bytes": rss_bytes(),
                      "threads": args.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
