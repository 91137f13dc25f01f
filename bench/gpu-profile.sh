#!/usr/bin/env bash
# Where a GPU's time goes: builds the training-step benchmark, the trainer and the per-kernel timer
# (bench/kernel_times/), then prints, for the IMDb recipe's step (h = 4, 32 x 256, fp32 with the fused and the
# composed attention, and bf16) and for one epoch of the trainer on the full data, each kernel's GPU time and
# the GPU's busy time against the wall time (the rest: the GPU waiting for the host). PyTorch's eager step too.
# One call on a GPU machine, about 4 minutes with the build (16 cores). Logs: $OUT (at most 8 files).
# Usage: bench/gpu-profile.sh [--build-dir DIR] [--skip-build]
set -uo pipefail
build=build-gpu
skip_build=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--skip-build]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-runs/gpu-profile/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
log="$out/profile.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start ))s"; }
source bench/gpu_env.sh
say "gpu-profile, git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
say "$(g++ --version | head -1); $(cmake --version | head -1); nvcc $(nvcc --version | grep -o 'release [0-9.]*')"
say "compilers here: $(ls /usr/bin | grep -E '^(g\+\+|clang\+\+)(-[0-9]+)?$' | tr '\n' ' ')"
printf "%s" "$gpu_env_notes" | tee -a "$log"
if [[ $skip_build -eq 0 ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_CUDA_EMULATOR=OFF -DEMBER_TESTS=OFF \
    "-DEMBER_CUDA_ARCHITECTURES=${EMBER_CUDA_ARCHITECTURES:-90}" > "$out/build.log" 2>&1 &&
    cmake --build "$build" -j "${JOBS:-$(nproc)}" --target train_step_bench imdb ember_kernel_times >> "$out/build.log" 2>&1
  status=$?
  say "build: rc $status [$(elapsed)]"
  [[ $status -eq 0 ]] || { grep -E "error" "$out/build.log" | head -20 | tee -a "$log"; exit 1; }
fi
times_lib="$PWD/$build/libember_kernel_times.so"
[[ -f "$times_lib" ]] || { say "no $times_lib (CUPTI not found at configure time)"; exit 1; }
profiled() {  # profiled NAME COMMAND...: runs COMMAND with the kernel timer, its table in $out/kernels.txt
  local name=$1; shift
  echo "+ $*" >> "$log"
  EMBER_KERNEL_TIMES_OUT="$out/table.tmp" EMBER_KERNEL_TIMES_TOP=25 LD_PRELOAD="$times_lib" timeout 150 "$@" \
    > "$out/stdout.tmp" 2>> "$out/stderr.log"
  local rc=$?
  tail -1 "$out/stdout.tmp" | tee -a "$log"
  { echo "=== $name (rc $rc): $*"; cat "$out/table.tmp" 2>/dev/null; echo; } >> "$out/kernels.txt"
  say "$name: rc $rc, $(head -1 "$out/table.tmp" 2>/dev/null) [$(elapsed)]"
  rm -f "$out/table.tmp"
}
init="$build/profile-init.safetensors"
"$build/train_step_bench" --write-init "$init" --heads 4 >> "$log" 2>&1
step=(--init "$init" --heads 4 --steps 20 --warmup 3 --device cuda --steps-only)
EMBER_ATTENTION=fused profiled "step fp32 fused (23 steps)" "$build/train_step_bench" "${step[@]}"
EMBER_ATTENTION=composed profiled "step fp32 composed (23 steps)" "$build/train_step_bench" "${step[@]}"
EMBER_ATTENTION=fused profiled "step bf16 fused (23 steps)" "$build/train_step_bench" "${step[@]}" --precision bf16
if timeout 60 python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  profiled "PyTorch eager step fp32 (23 steps)" python3 bench/train_step_torch.py --init "$init" --heads 4 \
    --steps 20 --warmup 3 --device cuda
fi
# The trainer: one epoch of the recipe on the full data (782 steps, replayed as a CUDA graph) and its evaluation.
profiled "trainer fp32, 1 epoch (782 steps + eval)" "$build/imdb" train --device cuda --epochs 1 --out "$build/profile-run" --log-every 400
profiled "trainer fp32, 1 epoch, --cuda-graph off" "$build/imdb" train --device cuda --epochs 1 --out "$build/profile-run2" --log-every 400 --cuda-graph off
profiled "trainer bf16, 1 epoch" "$build/imdb" train --device cuda --epochs 1 --out "$build/profile-run3" --log-every 400 --precision bf16
rm -f "$out/stdout.tmp"
say "done [$(elapsed)]; per-kernel tables: $out/kernels.txt"
