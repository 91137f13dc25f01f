#!/usr/bin/env bash
# Ember against PyTorch on the IMDb recipe's model, side by side, in one run, with the ratio per row:
# matmul GFLOP/s, one training step (h = 4 and h = 1), inference, a short real training run on IMDb,
# peak memory, the first loss from the same weights, and the distance to the CPU's FMA peak.
#
# Usage: bench/train_step.sh [--threads N] [--rounds R] [--steps S] [--run-steps N] [--no-matmul]
#   --threads N     threads for both frameworks (default 2)
#   --rounds R      alternate Ember and PyTorch processes R times; every figure is the median over
#                   the rounds (default 3). Each round's step figures are themselves medians of S steps.
#   --steps S       timed training steps and forward passes per process, after 3 warm-up ones (default 20)
#   --run-steps N   steps of the real IMDb run, h = 4 (default 200; 0 skips it)
#   --no-matmul     skip the matmul table
# Installs python3-torch and libopenblas0-openmp with apt-get when missing, builds Ember's side,
# and downloads IMDb on first use (for the real run). Writes the full log to runs/bench/train_step.log.
set -euo pipefail

threads=2
rounds=3
steps=20
run_steps=200
matmul=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --run-steps) run_steps="$2"; shift 2 ;;
    --no-matmul) matmul=0; shift ;;
    *) echo "usage: $0 [--threads N] [--rounds R] [--steps S] [--run-steps N] [--no-matmul]" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source bench/rival_env.sh  # python, torch_env; installs PyTorch when missing

build="${EMBER_BUILD_DIR:-build}"
[[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
echo "building Ember's benchmarks in $build ..." >&2
cmake --build "$build" --target train_step_bench matmul_bench imdb -j 2 >&2
bench="$build/train_step_bench"

out="runs/bench"
mkdir -p "$out"
work="$out/work"
mkdir -p "$work"
log="$out/train_step.log"
: > "$log"

# Shared inputs: initial weights + one full 32 x 256 batch per h, and the first IMDb batches.
for heads in 4 1; do
  "$bench" --write-init "$work/init_h$heads.safetensors" --heads "$heads" --seed 0
done
if [[ "$run_steps" -gt 0 ]]; then
  echo "preparing $run_steps IMDb batches (downloads IMDb on first use) ..." >&2
  "$build/imdb" batches --file "$work/batches.safetensors" --count "$run_steps" >&2
fi

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
  for heads in 4 1; do
    extra=()
    [[ "$heads" == 4 && "$run_steps" -gt 0 ]] && extra=(--batches "$work/batches.safetensors" --run-steps "$run_steps")
    echo "round $round/$rounds, h = $heads: ember ..." >&2
    "$bench" --init "$work/init_h$heads.safetensors" --heads "$heads" --threads "$threads" --steps "$steps" \
      --warmup 3 "${extra[@]}" | tee -a "$log" > "$work/ember_h${heads}_$round.json"
    echo "round $round/$rounds, h = $heads: torch ..." >&2
    "${torch_env[@]}" "$python" bench/train_step_torch.py --init "$work/init_h$heads.safetensors" --heads "$heads" \
      --threads "$threads" --steps "$steps" --warmup 3 "${extra[@]}" | tee -a "$log" > "$work/torch_h${heads}_$round.json"
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

peak_json="$work/peak.json"
"$build/matmul_bench" --threads "$threads" --reps 3 --json --peak --only 1024x1024x1024 > "$peak_json"

{
  "$python" bench/train_step_report.py "$work" "$rounds" "$threads" "$load_before" "$load_after" "$peak_json"
  if [[ "$matmul" == 1 ]]; then
    echo
    echo "## matmul (bench/matmul.sh --threads $threads --rounds $rounds)"
    EMBER_BUILD_DIR="$build" bash bench/matmul.sh --threads "$threads" --rounds "$rounds" --no-peak
  fi
} | tee -a "$log"
echo "full log: $log" >&2
