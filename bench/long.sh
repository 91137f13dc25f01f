#!/usr/bin/env bash
# Long inputs (issue 15), Ember and PyTorch 1.13 side by side in one run, ratios printed:
#   1. activation checkpointing at T = 2048, batch 8: a training step's peak memory and time, with and
#      without checkpointing each block (Ember: autograd/checkpoint.h; PyTorch: torch.utils.checkpoint);
#   2. sliding-window attention (1 global token) against full attention at T = 512 .. 4096: step time and
#      peak memory, and PyTorch's full attention at the same T. Two windows: 256 keys on either side (the
#      trainer's window:256), and Longformer's "window 256" (w = 256 keys in all, w/2 = 128 on either side:
#      the trainer's window:128, the whole-review preset's).
# Every configuration runs in a fresh process (peak RSS is per process).
#
# Usage: bench/long.sh [--threads N] [--steps S] [--batch B] [--lens "512 1024 2048 4096"] [--windows "256 128"]
#                     [--only checkpoint|window]
#   --batch B   the window table's batch (default 4; the checkpoint table is batch 8)
#   --windows   the trainer's window:W values to run (keys on either side of a token)
# Writes every JSON line to runs/bench/long.jsonl, the tables to runs/bench/long.md and the window
# table's plot (step time and peak memory against T, log-log) to runs/bench/long-window.svg.
set -euo pipefail

threads=2
steps=3
batch=4
lens="512 1024 2048 4096"
windows="256 128"
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --lens) lens="$2"; shift 2 ;;
    --windows) windows="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "usage: $0 [--threads N] [--steps S] [--batch B] [--lens \"T ...\"] [--windows \"W ...\"] [--only checkpoint|window]" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source bench/rival_env.sh  # python, torch_env; installs PyTorch when missing

build="${EMBER_BUILD_DIR:-build}"
[[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build" --target long_bench -j 2 >&2

mkdir -p runs/bench
out=runs/bench/long.jsonl
: > "$out"
ember() { echo "ember $*" >&2; "$build/long_bench" --threads "$threads" --steps "$steps" "$@" | tee -a "$out"; }
torch() {
  echo "torch $*" >&2
  "${torch_env[@]}" PYTHONPATH=bench "$python" bench/long_torch.py --threads "$threads" --steps "$steps" "$@" | tee -a "$out"
}

echo "{\"load_before\": \"$(uptime)\"}" >> "$out"
if [[ "$only" != window ]]; then
  ember --len 2048 --batch 8
  ember --len 2048 --batch 8 --checkpoint
  torch --len 2048 --batch 8
  torch --len 2048 --batch 8 --checkpoint
fi
if [[ "$only" != checkpoint ]]; then
  for T in $lens; do
    for W in $windows; do ember --len "$T" --batch "$batch" --attention "window:$W,global:1"; done
    ember --len "$T" --batch "$batch"
    torch --len "$T" --batch "$batch"
  done
fi
echo "{\"load_after\": \"$(uptime)\"}" >> "$out"
"$python" bench/long_report.py "$out" --svg runs/bench/long-window.svg | tee runs/bench/long.md
