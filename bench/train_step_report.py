"""The table of bench/train_step.sh: medians over the rounds of the JSON lines that
train_step_bench (Ember) and train_step_torch.py (PyTorch) printed, with the ratio of each row.

Usage: train_step_report.py WORK_DIR ROUNDS THREADS LOAD_BEFORE LOAD_AFTER PEAK_JSON
"""
import json
import statistics
import sys

work, rounds, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
load_before, load_after, peak_json = sys.argv[4], sys.argv[5], sys.argv[6]

# The recipe's shapes: batch 32 x 256 tokens, dim 128, FFN 512, 2 layers (the heads split the
# attention products but do not change their FLOPs). Multiply-adds count 2 FLOPs.
B, T, D, F, L, CLASSES = 32, 256, 128, 512, 2, 2
per_layer = 2 * B * T * D * 3 * D + 2 * B * T * D * D + 2 * 2 * B * T * D * F + 2 * 2 * B * T * T * D
FORWARD_FLOP = L * per_layer + 2 * B * D * CLASSES
STEP_FLOP = 3 * FORWARD_FLOP  # backward = two products per forward product


def load(framework, heads):
    return [json.load(open(f"{work}/{framework}_h{heads}_{r}.json")) for r in range(1, rounds + 1)]


def med(runs, key):
    return statistics.median(run[key] for run in runs)


peak = json.load(open(peak_json)).get("fma_peak_gflops")
ember = {h: load("ember", h) for h in (4, 1)}
torch = {h: load("torch", h) for h in (4, 1)}

print(f"# Ember vs PyTorch {torch[4][0]['torch']}: the IMDb recipe's model, batch {B} x {T}, {threads} threads")
print(f"load average (1/5/15 min) before: {load_before}, after: {load_after} "
      "(read the 1-minute figure before: near or above the thread count means other work shared "
      "the cores; 'after' includes the benchmark's own threads)")
print(f"medians over {rounds} alternating rounds; step and forward figures are each round's median "
      "of its timed steps")
print(f"FLOPs counted from the shapes: {STEP_FLOP / 1e9:.1f} GFLOP per training step, "
      f"{FORWARD_FLOP / 1e9:.1f} GFLOP per forward")
if peak:
    print(f"measured FP32 FMA peak of this machine, {threads} threads: {peak:.0f} GFLOP/s")
print()
print(f"| {'figure':<44} | {'Ember':>10} | {'PyTorch':>10} | {'Ember / PyTorch':>15} |")
print(f"|{'-' * 46}|{'-' * 12}|{'-' * 12}|{'-' * 17}|")


def row(name, e, t, fmt="{:.1f}", ratio=True):
    r = f"{e / t:.2f}" if ratio and t else "-"
    print(f"| {name:<44} | {fmt.format(e):>10} | {fmt.format(t):>10} | {r:>15} |")


for h in (4, 1):
    row(f"training step, h = {h}: ms (lower is better)", med(ember[h], "step_ms"), med(torch[h], "step_ms"))
for h in (4, 1):
    row(f"inference (forward), h = {h}: ms", med(ember[h], "forward_ms"), med(torch[h], "forward_ms"))
if ember[4][0]["run_steps"] > 0:
    steps = ember[4][0]["run_steps"]
    row(f"real IMDb run, h = 4, {steps} steps: real tokens/s", med(ember[4], "run_tokens_per_s"),
        med(torch[4], "run_tokens_per_s"), "{:.0f}")
    row(f"  its loss after {steps} steps", med(ember[4], "run_last_loss"), med(torch[4], "run_last_loss"),
        "{:.4f}", ratio=False)  # dropout masks differ between the two, so only roughly equal
for h in (4, 1):
    row(f"peak resident memory, h = {h} process: MiB", med(ember[h], "peak_rss_bytes") / 2**20,
        med(torch[h], "peak_rss_bytes") / 2**20, "{:.0f}")
for h in (4, 1):
    e, t = ember[h][0]["first_loss"], torch[h][0]["first_loss"]
    print(f"| {f'first loss, h = {h} (same weights and batch)':<44} | {e:>10.6f} | {t:>10.6f} | "
          f"{f'|diff| {abs(e - t):.1e}':>15} |")
for h in (4, 1):
    e = STEP_FLOP / (med(ember[h], "step_ms") / 1e3) / 1e9
    t = STEP_FLOP / (med(torch[h], "step_ms") / 1e3) / 1e9
    row(f"training step, h = {h}: achieved GFLOP/s", e, t)
    if peak:
        row(f"  as % of the FMA peak", 100 * e / peak, 100 * t / peak, "{:.0f}%", ratio=False)

worst = max(abs(ember[h][0]["first_loss"] - torch[h][0]["first_loss"]) for h in (4, 1))
print()
print(f"first losses agree to {worst:.1e} ({'within' if worst <= 1e-4 else 'NOT within'} 1e-4)")
