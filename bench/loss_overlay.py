"""Two training runs' metrics.jsonl side by side: the loss curves as means over windows of steps
(the curves of a one-process run and of an mpirun run of the same recipe must overlay), the first
step where the raw losses part by more than float rounding, and each epoch's test accuracy.

Usage: loss_overlay.py A/metrics.jsonl B/metrics.jsonl [--window N] [--names A,B]
"""
import argparse
import json
import statistics


def load(path):
    steps, epochs = {}, {}
    for record in map(json.loads, open(path)):
        if record.get("kind") == "step":
            steps.setdefault(record["step"], record["loss"])  # the first run's, if a file holds two
        elif record.get("kind") == "epoch":
            epochs.setdefault(record["epoch"], record)
    return steps, epochs


parser = argparse.ArgumentParser()
parser.add_argument("a")
parser.add_argument("b")
parser.add_argument("--window", type=int, default=100)
parser.add_argument("--names", default="A,B")
args = parser.parse_args()
name_a, name_b = args.names.split(",")
(steps_a, epochs_a), (steps_b, epochs_b) = load(args.a), load(args.b)
common = sorted(set(steps_a) & set(steps_b))
parted = next((s for s in common if abs(steps_a[s] - steps_b[s]) > 1e-5 * max(abs(steps_b[s]), 1e-3)), None)
print(f"{len(common)} common steps; the raw losses agree to 1e-5 (relative) up to step "
      f"{(parted - 1) if parted else common[-1]}" + (f", then part (training amplifies rounding)" if parted else ""))
print()
print(f"| steps | mean loss, {name_a} | mean loss, {name_b} | difference |")
print("|---|---:|---:|---:|")
worst = 0.0
for start in range(common[0], common[-1] + 1, args.window):
    window = [s for s in common if start <= s < start + args.window]
    if not window:
        continue
    ma = statistics.mean(steps_a[s] for s in window)
    mb = statistics.mean(steps_b[s] for s in window)
    worst = max(worst, abs(ma - mb))
    print(f"| {window[0]}-{window[-1]} | {ma:.4f} | {mb:.4f} | {ma - mb:+.4f} |")
print(f"\nlargest difference between the {args.window}-step means: {worst:.4f}")
print()
print(f"| epoch | test accuracy, {name_a} | test accuracy, {name_b} | difference (points) |")
print("|---|---:|---:|---:|")
for epoch in sorted(set(epochs_a) & set(epochs_b)):
    acc_a, acc_b = epochs_a[epoch]["test_accuracy"], epochs_b[epoch]["test_accuracy"]
    print(f"| {epoch} | {100 * acc_a:.2f}% | {100 * acc_b:.2f}% | {100 * (acc_a - acc_b):+.2f} |")
