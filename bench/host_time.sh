#!/usr/bin/env bash
# The host's share of the GPU training step, measured without a GPU (docs/cuda.md, "The host's
# share"): the programs built on the CUDA emulator run in its dry mode (EMBER_EMULATOR_DRY=1: every
# launch, copy, wait and graph replay is made and counted, no kernel or library work is done), so
# their step times are the host's own. Prints, per training step of the recipe (h = 4, 2 layers, dim
# 128, batch 32 x 256, fp32):
#   1. bench/train_step_bench: the step eager (composed and fused attention) and replayed as a CUDA
#      graph (--cuda-graph, as the trainer runs it): host microseconds, and what it asks of the GPU
#      (launches, library calls, copies, memsets, host waits);
#   2. imdb train --device cuda, 3 epochs on a synthetic set of IMDb's size, review lengths and
#      vocabulary size: host microseconds per step and per evaluated batch, and the whole run's
#      counts per step.
# The emulator's own cost per call (well under a microsecond: a lock, a count, a queued no-op) is
# not a GPU driver's (about 2-4 us a launch): for a GPU, add the work items per step times that.
#
# Usage: bench/host_time.sh [--steps S] [--epochs E]    (BUILD_DIR, default build-fast: a build with
#        the emulator, as scripts/test-area.sh makes; its train_step_bench_emulated and imdb_emulated are built)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=50
epochs=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps S] [--epochs E]" >&2; exit 2 ;;
  esac
done
BUILD_DIR=${BUILD_DIR:-build-fast}
[ -f "$BUILD_DIR/CMakeCache.txt" ] || { echo "no build in $BUILD_DIR: run scripts/test-area.sh cuda-emulated once, or set BUILD_DIR" >&2; exit 1; }
cmake --build "$BUILD_DIR" -j"$(nproc)" --target train_step_bench_emulated imdb_emulated >/dev/null
BENCH=$BUILD_DIR/train_step_bench_emulated
IMDB=$BUILD_DIR/imdb_emulated
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export EMBER_EMULATOR_DRY=1

# 1. The benchmark's step.
"$BENCH" --write-init "$OUT/init.safetensors" --heads 4
for mode in composed fused graph-composed graph-fused; do
  graph=()
  [[ $mode == graph-* ]] && graph=(--cuda-graph)
  EMBER_ATTENTION=${mode#graph-} "$BENCH" --init "$OUT/init.safetensors" --heads 4 --device cuda --steps "$steps" \
    --warmup 3 --steps-only --threads 1 "${graph[@]}" | tail -n 1 > "$OUT/step-$mode.json"
done

# 2. The trainer on a set of IMDb's size and vocabulary: 50,000 reviews (25,000 to train, 25,000 to
# test) as long as the shipped sample's, of words drawn from 40,000 by Zipf's law (the 20,000 most
# frequent make the recipe's vocabulary), in the sample's order of labels (test neg, train neg, test pos, train pos).
python3 - tests/data/imdb_small.json "$OUT/imdb50k.json" <<'PY'
import json, random, re, string, sys
small = json.load(open(sys.argv[1]))
q = len(small) // 4
rng = random.Random(0)
def word(i):
    s = ""
    while True:
        s += string.ascii_lowercase[i % 26]
        i //= 26
        if i == 0:
            return "w" + s
cumulative = list(__import__("itertools").accumulate(1.0 / (i + 1) for i in range(40000)))
reviews = []
for k in range(4):
    for n in range(12500):
        length = len(re.findall(r"[a-z0-9']+", small[k * q + n % q]["t"].lower()))
        reviews.append({"t": " ".join(word(i) for i in rng.choices(range(40000), cum_weights=cumulative, k=length)), "s": k // 2})
json.dump(reviews, open(sys.argv[2], "w"))
PY
EMBER_EMULATOR_COUNTS=1 "$IMDB" train --data "$OUT/imdb50k.json" --device cuda --epochs "$epochs" --threads 1 \
  --out "$OUT/run" > "$OUT/train.log" 2> "$OUT/train.err" || { cat "$OUT/train.err"; exit 1; }

python3 - "$OUT" "$steps" <<'PY'
import json, os, sys
out, steps = sys.argv[1], int(sys.argv[2])
def per(counts, n):
    keys = ["work_items", "kernel_launches", "graph_launches", "library_calls", "copies_to_device", "copies_to_host",
            "copies_on_device", "memsets", "event_records", "stream_waits", "host_waits"]
    return "  ".join(f"{k} {counts[k] / n:.1f}" for k in keys)
print("The training step (bench/train_step_bench, recipe h = 4, 32 x 256, fp32), emulator dry mode, per step:")
print(f"{'mode':16} {'host us':>8} {'(CPU)':>6}  what it asks of the GPU")
for mode in ["composed", "fused", "graph-composed", "graph-fused"]:
    r = json.loads(open(f"{out}/step-{mode}.json").read())
    print(f"{mode:16} {1e3 * r['step_ms']:8.0f} {1e3 * r['step_cpu_ms']:6.0f}  {per(r['emulator_counts'], r['steps'])}")
records = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl")]
epochs = [r for r in records if r.get("kind") == "epoch"]
steps_per_epoch = epochs[0]["step"]
err = open(f"{out}/train.err").read()
counts = json.loads(err.split("emulator counts: ")[-1].splitlines()[0])
total_steps = epochs[-1]["step"]
eval_batches = -(-epochs[0]["test_reviews"] // 64)
print(f"\nThe trainer (imdb train --device cuda, recipe, {len(epochs)} epochs of {steps_per_epoch} steps, "
      f"{epochs[0]['test_reviews']} test reviews), emulator dry mode:")
for e in epochs:
    print(f"  epoch {e['epoch']}: {1e6 * e['train_seconds'] / steps_per_epoch:.0f} us per step (train), "
          f"{1e6 * e['eval_seconds'] / eval_batches:.0f} us per evaluated batch of 64 ({e['eval_seconds']:.2f} s)")
print(f"  whole run, per training step (evaluations, saves and captures included): {per(counts, total_steps)}")
print("  (wall-clock seconds from metrics.jsonl: on a busy machine they include time the process waited for a core)")
PY
