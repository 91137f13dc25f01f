#!/usr/bin/env bash
# Ember's GEMM vs PyTorch + OpenBLAS at the model's matmul shapes: one side-by-side GFLOP/s table.
#
# Usage: bench/matmul.sh [--threads N] [--rounds R] [--reps R] [--transposed] [--no-peak]
#   --threads N    threads for both sides (default 2)
#   --rounds R     alternate ember and torch runs R times and report per-shape medians (default 3);
#                  alternating spreads the noise of a shared machine over both sides
#   --reps R       timed repetitions per shape inside each run (default 9; each run reports a median)
#   --transposed   also time A^T B and A B^T
# Installs python3-torch and libopenblas0-openmp with apt-get when missing, and builds
# build/matmul_bench when needed (EMBER_BUILD_DIR=dir picks another build folder).
set -euo pipefail

threads=2
rounds=3
reps=9
transposed=""
peak="--peak"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --transposed) transposed="--transposed"; shift ;;
    --no-peak) peak=""; shift ;;
    *) echo "usage: $0 [--threads N] [--rounds R] [--reps R] [--transposed] [--no-peak]" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

source bench/rival_env.sh  # python, torch_env; installs PyTorch when missing

build="${EMBER_BUILD_DIR:-build}"
bench="$build/matmul_bench"
if [[ ! -x "$bench" ]] || [[ -n "$(find core bench -newer "$bench" \( -name '*.cpp' -o -name '*.h' \) 2>/dev/null | head -1)" ]]; then
  echo "building $bench ..." >&2
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
  cmake --build "$build" --target matmul_bench -j 2 >&2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Other processes on the machine skew both sides: the load averages go into the table header.
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: ember ..." >&2
  round_peak=""
  [[ $round -eq 1 ]] && round_peak="$peak"
  "$bench" --threads "$threads" --reps "$reps" --json $transposed $round_peak \
    > "$work/ember_$round.json"
  echo "round $round/$rounds: torch ..." >&2
  "${torch_env[@]}" "$python" bench/matmul_torch.py --threads "$threads" --reps "$reps" $transposed \
      > "$work/torch_$round.json"
done

load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$work" "$rounds" "$load_before" "$load_after" <<'EOF'
import json, statistics, sys

work, rounds, load_before, load_after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ember_runs = [json.load(open(f"{work}/ember_{r}.json")) for r in range(1, rounds + 1)]
torch_runs = [json.load(open(f"{work}/torch_{r}.json")) for r in range(1, rounds + 1)]

def medians(runs):
    by_name = {}
    for run in runs:
        for result in run["results"]:
            by_name.setdefault(result["name"], []).append(result["gflops"])
    return {name: statistics.median(values) for name, values in by_name.items()}

ember, rival = medians(ember_runs), medians(torch_runs)
first_torch = torch_runs[0]
blas = first_torch.get("openblas") or {}
print(f"threads: ember {ember_runs[0]['threads']} (kernel {ember_runs[0]['kernel']}), "
      f"torch {first_torch['threads']} (torch {first_torch['torch']})")
print(f"rival BLAS: {first_torch.get('openblas_path') or first_torch['blas']}")
if blas:
    print(f"OpenBLAS core: {blas.get('core')}   config: {blas.get('config')}")
peak = ember_runs[0].get("fma_peak_gflops")
if peak:
    print(f"measured FP32 FMA peak: {peak:.0f} GFLOP/s with {ember_runs[0]['threads']} threads")
print(f"load average (1/5/15 min) before: {load_before}, after: {load_after} "
      f"(anything near or above the thread count means the numbers are contaminated)")
print(f"GFLOP/s, median of {rounds} alternating runs (each run: median of its repetitions)\n")
print(f"{'shape':<26} {'ember':>9} {'torch':>9} {'ratio':>7}" + (f" {'%peak':>6}" if peak else ""))
for result in ember_runs[0]["results"]:
    name = result["name"]
    e, t = ember[name], rival.get(name)
    line = f"{name:<26} {e:9.1f} " + (f"{t:9.1f} {e / t:7.2f}" if t else f"{'-':>9} {'-':>7}")
    if peak:
        line += f" {100 * e / peak:5.0f}%"
    print(line)
EOF
