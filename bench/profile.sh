#!/usr/bin/env bash
# Where a training step's time goes: perf samples (cpu-clock, so it works without hardware
# counters) of bench/train_step_bench, grouped into the parts of the step by profile_summary.py.
#
# Usage: bench/profile.sh [--heads H] [--threads N] [--steps S]
# Installs linux-perf with apt-get when missing. The run includes the timed forward passes that
# train_step_bench makes after the training steps (about a quarter of the samples).
set -euo pipefail
heads=4
threads=2
steps=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --heads) heads="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "usage: $0 [--heads H] [--threads N] [--steps S]" >&2; exit 2 ;;
  esac
done
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
work="runs/bench/profile"
source bench/perf_common.sh
prepare_profile "$work" "$heads"
perf record -q -e cpu-clock -F 1999 -o "$work/perf.data" \
  "$build/train_step_bench" --init "$init" --heads "$heads" --threads "$threads" \
  --steps "$steps" --warmup 1 >&2
echo "profile of $steps training steps + $steps forward passes, h = $heads, $threads threads ($(git rev-parse --short HEAD)):"
perf report -i "$work/perf.data" --no-children --sort symbol --header 2>/dev/null | python3 bench/profile_summary.py
