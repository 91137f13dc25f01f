#!/usr/bin/env bash
# bfloat16 mixed precision against float32, Ember and PyTorch side by side in one run (docs/performance.md):
#   1. the CPU's peaks: float32 FMA and bfloat16 vdpbf16ps loops on every thread;
#   2. Ember's GEMM at the recipe's shapes, float32 (cpu::gemm) and bf16 (cpu::gemm_bf16, on the kernel "auto"
#      picks, named in the output; EMBER_BF16_KERNEL=... to force one), with the ratio;
#   3. the recipe's training step (h = 4, 32 x 256 tokens): Ember fp32 and bf16, PyTorch 1.13 fp32 and
#      CPU bf16 autocast, alternated for R rounds; the median of each, and the ratios.
# Prints the load (uptime) before and after: on a shared machine, rerun it when the load is low.
#
# Usage: bench/bf16.sh [--threads N] [--rounds R] [--steps S] [--warmup W] [--no-gemm]
#   defaults 2, 3, 10, 3; --no-gemm skips parts 1 and 2
set -euo pipefail

threads=2
rounds=3
steps=10
warmup=3
gemm=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --no-gemm) gemm=0; shift ;;
    *) echo "usage: $0 [--threads N] [--rounds R] [--steps S] [--warmup W] [--no-gemm]" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source bench/rival_env.sh  # python, torch_env; installs PyTorch when missing

build="${EMBER_BUILD_DIR:-build}"
[[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
echo "building Ember's benchmarks in $build ..." >&2
cmake --build "$build" --target train_step_bench matmul_bench -j 2 >&2

work="runs/bench/bf16"
mkdir -p "$work"
"$build/train_step_bench" --write-init "$work/init_h4.safetensors" --heads 4 --seed 0

echo "# bfloat16 vs float32 (bench/bf16.sh --threads $threads --rounds $rounds --steps $steps --warmup $warmup)"
echo "load before: $(uptime)"
if [[ "$gemm" == 1 ]]; then
  echo
  echo "## peaks and GEMM at the recipe's shapes (median of 9 runs each)"
  "$build/matmul_bench" --threads "$threads" --bf16 --peak --transposed
fi
echo
echo "## training step, h = 4, batch 32 x 256 (median of $steps steps after $warmup, then of $rounds rounds)"
for round in $(seq 1 "$rounds"); do
  for precision in fp32 bf16; do
    echo "round $round/$rounds: ember $precision ..." >&2
    "$build/train_step_bench" --init "$work/init_h4.safetensors" --heads 4 --threads "$threads" --steps "$steps" \
      --warmup "$warmup" --precision "$precision" > "$work/ember_${precision}_$round.json"
    echo "round $round/$rounds: torch $precision ..." >&2
    "${torch_env[@]}" "$python" bench/train_step_torch.py --init "$work/init_h4.safetensors" --heads 4 \
      --threads "$threads" --steps "$steps" --warmup "$warmup" --precision "$precision" > "$work/torch_${precision}_$round.json"
  done
done
"$python" - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def med(framework, precision, key):
    return statistics.median(json.load(open(f"{work}/{framework}_{precision}_{r}.json"))[key] for r in range(1, rounds + 1))
rows = [(f, p) for f in ("ember", "torch") for p in ("fp32", "bf16")]
step = {row: med(*row, "step_ms") for row in rows}
fwd = {row: med(*row, "forward_ms") for row in rows}
loss = {row: med(*row, "first_loss") for row in rows}
print(f"{'':14} {'step ms':>9} {'forward ms':>11} {'first loss':>11}")
for row in rows:
    print(f"{row[0] + ' ' + row[1]:14} {step[row]:9.1f} {fwd[row]:11.1f} {loss[row]:11.5f}")
print()
print(f"ember bf16 / ember fp32 step: {step['ember', 'bf16'] / step['ember', 'fp32']:.2f}x (the issue asks <= 0.6)")
print(f"torch bf16 / torch fp32 step: {step['torch', 'bf16'] / step['torch', 'fp32']:.2f}x")
print(f"ember bf16 / torch bf16 step: {step['ember', 'bf16'] / step['torch', 'bf16']:.2f}x (< 1: Ember faster)")
print(f"ember bf16 / torch fp32 step: {step['ember', 'bf16'] / step['torch', 'fp32']:.2f}x")
print(f"ember fp32 / torch fp32 step: {step['ember', 'fp32'] / step['torch', 'fp32']:.2f}x")
# The same ratios less exposed to this machine's minute-to-minute speed: each round's (its fp32 and bf16 runs
# seconds apart), and every timed step of every round pooled, first quartile and median.
def steps(framework, precision):
    return sorted(t for r in range(1, rounds + 1)
                  for t in json.load(open(f"{work}/{framework}_{precision}_{r}.json"))["step_ms_all"])
print()
for framework in ("ember", "torch"):
    per_round = [json.load(open(f"{work}/{framework}_bf16_{r}.json"))["step_ms"] /
                 json.load(open(f"{work}/{framework}_fp32_{r}.json"))["step_ms"] for r in range(1, rounds + 1)]
    b, f = steps(framework, "bf16"), steps(framework, "fp32")
    print(f"{framework} bf16 / fp32 by round: {', '.join(f'{x:.2f}' for x in per_round)} (median "
          f"{statistics.median(per_round):.2f}x); pooled steps: first quartile {b[len(b) // 4] / f[len(f) // 4]:.2f}x, "
          f"median {statistics.median(b) / statistics.median(f):.2f}x")
PY
echo
echo "load after: $(uptime)"
