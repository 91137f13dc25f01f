#!/usr/bin/env bash
# Per-op profile of the recipe's training step, float32 against bf16, forward and backward apart:
# perf samples CPU time (cpu-clock: no hardware counters needed) with call stacks of
# `train_step_bench --steps-only --threads 1`, charged to ops by bench/profile_ops.py.
# One thread, so every stack reaches its op; CPU time, so other jobs on the machine move it little.
#
# Usage: bench/profile_ops.sh [--heads H] [--steps S] [--hz HZ]     (defaults 4, 6, 499)
# Installs linux-perf with apt-get when missing. Output: the table on stdout; perf data in runs/bench/profile_ops.
set -euo pipefail
heads=4
steps=6
hz=499
while [[ $# -gt 0 ]]; do
  case "$1" in
    --heads) heads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --hz) hz="$2"; shift 2 ;;
    *) echo "usage: $0 [--heads H] [--steps S] [--hz HZ]" >&2; exit 2 ;;
  esac
done
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
work="runs/bench/profile_ops"
source bench/perf_common.sh
prepare_profile "$work" "$heads"
for precision in fp32 bf16; do
  # Samples before the timed steps (start-up, the 2 warm-up steps' first touches of memory) are left
  # out by their time stamps (CLOCK_MONOTONIC, as the bench's timed_from_monotonic_s).
  perf record -q -e cpu-clock -k CLOCK_MONOTONIC -F "$hz" --call-graph dwarf,16384 -o "$work/$precision.data" \
    "$build/train_step_bench" --init "$init" --heads "$heads" --threads 1 \
    --steps "$steps" --warmup 2 --steps-only --precision "$precision" > "$work/$precision.json"
  perf script --no-inline -i "$work/$precision.data" -F tid,time,ip,sym,dso 2>/dev/null > "$work/$precision.txt"
  echo "$hz" > "$work/$precision.hz"
done
echo "per-op CPU ms per training step, h = $heads, 1 thread, $steps steps ($(git rev-parse --short HEAD)):"
python3 bench/profile_ops.py "$steps" "fp32=$work/fp32.txt" "bf16=$work/bf16.txt"
