"""PyTorch's half of bench/scaling.sh: the IMDb recipe's model (bench/train_step_torch.py) trained on
one process with T threads, or on N processes with DistributedDataParallel over gloo, each process on
its slice of the same global batch (random tokens, no padding), timed like bench/scaling_bench.cpp.
Prints one JSON object (rank 0).

Usage: scaling_torch.py [--ranks N] [--threads T] [--steps S] [--warmup W] [--batch-size B] [--len L]
                        [--heads H] [--bucket-mb M]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step_torch import Classifier  # noqa: E402  the same model as the step benchmark


def run(rank, args, port):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ranks = args.ranks
    if ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    model = Classifier(heads=args.heads)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embedding" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embedding" not in n)]
    comm = {"seconds": 0.0}
    if ranks > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)

        # The all-reduce of each bucket, timed from its start to its completion (gloo's threads).
        def timed_allreduce(state, bucket):
            start = time.perf_counter()
            tensor = bucket.buffer().div_(ranks)
            future = dist.all_reduce(tensor, async_op=True).get_future()

            def done(fut):
                comm["seconds"] += time.perf_counter() - start
                return fut.value()[0]

            return future.then(done)

        model.register_comm_hook(None, timed_allreduce)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=5e-4, foreach=False
    )
    B, T = args.batch_size, args.len
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(2, 20002, (B, T), generator=g)
    labels = torch.randint(0, 2, (B,), generator=g)
    first, count = rank * B // ranks, (rank + 1) * B // ranks - rank * B // ranks
    tokens, labels = tokens[first : first + count], labels[first : first + count]
    padding = torch.zeros(count, T, dtype=torch.bool)
    step_ms, backward_ms = [], []
    comm_before = 0.0
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            comm_before = comm["seconds"]
        start = time.perf_counter()
        loss = F.cross_entropy(model(tokens, padding), labels)
        optimizer.zero_grad(set_to_none=True)
        backward_start = time.perf_counter()
        loss.backward()  # DDP: returns once every bucket's all-reduce is done
        backward_end = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if i >= args.warmup:
            step_ms.append(1e3 * (time.perf_counter() - start))
            backward_ms.append(1e3 * (backward_end - backward_start))
    if rank == 0:
        step = statistics.median(step_ms)
        print(json.dumps({"framework": "pytorch", "ranks": ranks, "threads": torch.get_num_threads(),
                          "step_ms": round(step, 2), "backward_ms": round(statistics.median(backward_ms), 2),
                          "tokens_per_s": round(B * T / (step / 1e3)),
                          "allreduce_ms_per_step": round(1e3 * (comm["seconds"] - comm_before) / args.steps, 3),
                          "step_ms_all": [round(x, 1) for x in step_ms]}), flush=True)
    if ranks > 1:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--len", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    args = parser.parse_args()
    if args.ranks > 1 and not (dist.is_available() and dist.is_gloo_available()):
        print(json.dumps({"framework": "pytorch", "ranks": args.ranks, "skipped": "this torch has no gloo"}))
        return
    port = 29500 + os.getpid() % 1000
    if args.ranks == 1:
        run(0, args, port)
    else:
        mp.spawn(run, args=(args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
