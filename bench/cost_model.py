"""A ring all-reduce cost model fitted to bench/scaling.sh's measured link times, and the scaling
efficiency it predicts (docs/distributed.md). Reads runs/bench/scaling.jsonl.

Ring all-reduce of S bytes over N ranks, in c calls (buckets): each call takes 2 (N - 1) steps of
latency alpha, and each rank's link carries 2 (N - 1) / N x S bytes at bandwidth beta:
    T(N, S, c) = c * 2 (N - 1) * alpha + 2 (N - 1) / N * S / beta
The measured points (N = 2, two bucket sizes per link) give alpha and beta per link by least squares.
The prediction keeps each rank's work fixed (16 reviews of 256 tokens per rank, weak scaling) at the
compute time measured for Ember's 2 x 1 step, and sends the dense gradient (sparse rows shrink it on
2 ranks, but the union of the rows N ranks touch grows towards the whole table).
"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1] if len(sys.argv) > 1 else "runs/bench/scaling.jsonl")]


def median(label, key):
    values = [r[key] for r in rows if r["label"] == label and key in r]
    return statistics.median(values) if values else None


def fit(points):
    """Least squares of ms = calls * a + link_bytes * b; returns (alpha in us, beta in Gbit/s)."""
    sxx = sum(c * c for c, _, _ in points)
    sxy = sum(c * y for c, y, _ in points)
    syy = sum(y * y for _, y, _ in points)
    sxt = sum(c * t for c, _, t in points)
    syt = sum(y * t for _, y, t in points)
    det = sxx * syy - sxy * sxy
    if abs(det) < 1e-12:
        return None
    a = (sxt * syy - syt * sxy) / det  # ms per call
    b = (sxx * syt - sxy * sxt) / det  # ms per link byte
    # Neither cost can be negative: when noise makes one so, fit the other alone.
    if a < 0:
        a, b = 0.0, syt / syy
    elif b < 0:
        a, b = sxt / sxx, 0.0
    alpha_us = 1e3 * a / 2.0  # N = 2: a call is 2 (N - 1) = 2 latency steps
    beta_gbit = 8.0 / (b * 1e-3) / 1e9 if b > 0 else float("inf")
    return alpha_us, beta_gbit


print("\nRing all-reduce model, fitted (N = 2; ms = calls x 2 alpha + bytes through the link / beta):")
print("| link | points | alpha (latency per step) | beta (bandwidth) | largest misfit |")
print("|---|---:|---:|---:|---:|")
fitted = {}
for label, name in [("link_local", "one host, shared memory"), ("link_none", "two hosts, veth unlimited"),
                    ("link_10gbit", "two hosts, 10 Gbit/s"), ("link_1gbit", "two hosts, 1 Gbit/s")]:
    # Each rank's link carries 2 (N - 1) / N x the buffers: the bytes for N = 2.
    points = [(r["collectives_per_step"], r["bytes_per_step"] * 2 * (r["ranks"] - 1) / r["ranks"],
               r["allreduce_ms_per_step"]) for r in rows if r["label"] == label and "allreduce_ms_per_step" in r]
    if len({p[0] for p in points}) < 2:
        continue
    result = fit(points)
    if result is None:
        continue
    alpha, beta = result
    fitted[label] = result
    misfit = max(abs(c * 2 * alpha / 1e3 + y * 8 / (beta * 1e9) * 1e3 - t) / t for c, y, t in points)
    print(f"| {name} | {len(points)} | {alpha:.1f} us | {beta:.2f} Gbit/s | {100 * misfit:.0f}% |")

step = median("ember_2x1", "step_ms")
exposed = median("ember_2x1", "exposed_ms_per_step") or 0.0
backward = median("ember_2x1", "backward_ms")
if not fitted or step is None or backward is None:
    print("(no fit or no 2 x 1 step measured: no prediction)")
    sys.exit(0)
compute = step - exposed  # per rank, 16 reviews x 256 tokens
alpha_us = fitted.get("link_10gbit", next(iter(fitted.values())))[0]
params = 2990082
print(f"\nPredicted scaling efficiency (compute per rank {compute:.0f} ms of which backward {backward:.0f} ms, "
      f"alpha {alpha_us:.1f} us from the 10 Gbit/s fit; efficiency = compute / (compute + exposed all-reduce)):")
print("| model | gradient | ranks | link | all-reduce ms/step | efficiency, no overlap | efficiency, overlapped |")
print("|---|---:|---:|---:|---:|---:|---:|")
for model, scale, bucket_mb in [("this one (3.0 M parameters)", 1, 1.0), ("100x larger (299 M)", 100, 25.0)]:
    size = 4.0 * params * scale
    calls = max(1, round(size / (bucket_mb * 1e6)))
    # The last bucket cannot hide behind backward: here the embedding table (86% of the bytes),
    # in the larger model one bucket of 25 MB.
    last_share = 2560256 / params if scale == 1 else 1.0 / calls
    t_compute, t_backward = compute * scale, backward * scale
    for n in (8, 64, 512):
        for gbit in (10, 100):
            t = calls * 2 * (n - 1) * alpha_us / 1e3 + 2 * (n - 1) / n * size * 8 / (gbit * 1e9) * 1e3
            t_last = 2 * (n - 1) * alpha_us / 1e3 + 2 * (n - 1) / n * size * last_share * 8 / (gbit * 1e9) * 1e3
            hidden = max(t_last, t - t_backward)
            print(f"| {model} | {size / 1e6:.0f} MB | {n} | {gbit} Gbit/s | {t:.1f} | "
                  f"{100 * t_compute / (t_compute + t):.0f}% | {100 * t_compute / (t_compute + hidden):.0f}% |")
