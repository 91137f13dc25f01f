#!/usr/bin/env bash
# One script for a machine with an NVIDIA GPU: builds Ember (Release, CUDA), runs the CUDA tests,
# times the IMDb recipe's training step on the GPU (Ember with the composed attention and with the
# fused one, and PyTorch on the same GPU when a CUDA build of torch is installed), trains the recipe
# on the shipped small data on the GPU and on the CPU, and prints a table: test results, ms per step
# for each, their ratios, peak GPU memory, and how far the GPU's losses are from the CPU's. Meant to
# finish within 8 minutes on an H200, build included. The full log goes to
# runs/gpu-check/gpu-check-<UTC time>.log (its path is printed).
#
# Usage: bench/gpu-check.sh [--steps S] [--build-dir DIR] [--skip-build]
#   --steps S        timed training steps per framework, after 3 warm-up ones (default 20)
#   --build-dir DIR  where to build (default build-gpu)
#   --skip-build     use what DIR already holds
# Environment: EMBER_CUDA_ARCHITECTURES (default 90: H100/H200; 80 for an A100), JOBS (default nproc).
set -uo pipefail

steps=20
build=build-gpu
skip_build=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    *) echo "usage: $0 [--steps S] [--build-dir DIR] [--skip-build]" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="runs/gpu-check"
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
log="$repo/$out/gpu-check-$stamp.log"
work="$out/$stamp"
mkdir -p "$work"
: > "$log"
say() { echo "$*" | tee -a "$log"; }       # to the terminal and the log
run() { echo "+ $*" >> "$log"; "$@" >> "$log" 2>&1; }  # to the log only
start_all=$(date +%s)

say "gpu-check $stamp: log $log"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >> "$log" 2>&1; then
  say "no NVIDIA GPU here (nvidia-smi failed): nothing to check"
  exit 1
fi
gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
say "GPU: $gpu_name"
nvidia-smi >> "$log" 2>&1

# ---- 1. Build (only the targets used here)
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
# C++ dependencies carried in .deps/ (scripts/bundle-gpu-deps.sh) when the image lacks them; cuDNN
# from the nvidia-cudnn pip package when /usr/local/cuda has none.
if [[ -d .deps/usr ]]; then
  export CMAKE_PREFIX_PATH="$repo/.deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$repo/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "using the dependencies in .deps/" >> "$log"
fi
if [[ -z "${CUDNN_ROOT:-}" && ! -f /usr/local/cuda/include/cudnn.h ]]; then
  cudnn_dir=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])" 2>/dev/null || true)
  if [[ -n "$cudnn_dir" && -f "$cudnn_dir/include/cudnn.h" ]]; then
    export CUDNN_ROOT="$cudnn_dir" LD_LIBRARY_PATH="$cudnn_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "cuDNN from $cudnn_dir" >> "$log"
  fi
fi
jobs=${JOBS:-$(nproc)}
arch=${EMBER_CUDA_ARCHITECTURES:-90}
build_status="skipped"
t0=$(date +%s)
if [[ $skip_build -eq 0 ]]; then
  if run cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_CUDA_EMULATOR=OFF "-DEMBER_CUDA_ARCHITECTURES=$arch" &&
     run cmake --build "$build" -j "$jobs" --target ember_tests train_step_bench imdb softmax_gpu_bench; then
    build_status="ok"
  else
    build_status="FAILED"
  fi
fi
build_s=$(( $(date +%s) - t0 ))
say "build: $build_status (${build_s}s, sm_$arch, -j$jobs)"
grep -q "CUDA backend ON" "$log" || [[ $skip_build -eq 1 ]] || say "warning: CMake did not report 'CUDA backend ON' (see the log)"
if [[ "$build_status" == "FAILED" ]]; then
  say "the build failed: see $log"
  exit 1
fi

# ---- 2. The CUDA tests (every doctest case whose name starts with cuda)
t0=$(date +%s)
ctest_out="$work/ctest.txt"
ctest --test-dir "$build" -R '^cuda' -j 4 --output-on-failure --timeout 300 > "$ctest_out" 2>&1
cat "$ctest_out" >> "$log"
tests_s=$(( $(date +%s) - t0 ))
passed=$(grep -cE "Test +#[0-9]+: .* Passed" "$ctest_out")
# ctest's closing list names every test that did not pass: skipped ones say (Skipped), the rest failed.
failed=$(grep -E "^\s+[0-9]+ - " "$ctest_out" | grep -cv "(Skipped)$")
skipped=$(grep -cE "\*\*\*Skipped|Not Run" "$ctest_out")
say "CUDA tests: $passed passed, $failed failed, $skipped skipped (${tests_s}s)"
grep -E "^\s+[0-9]+ - " "$ctest_out" | grep -v "(Skipped)$" | sed 's/^\s*/  failed: /' | tee -a "$log"

# ---- 3. One training step of the recipe's model (h = 4, 32 x 256, no padding), timed twice: with
# the composed attention (EMBER_ATTENTION=composed, the default: cuBLAS GEMMs + masked_fill +
# softmax) and with the tiled fused kernels (EMBER_ATTENTION=fused, cuda/attention_kernels.cu).
# Their ratio decides which should be the default, once the fused kernels pass their tests.
json_field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d.get(sys.argv[2], ''))" "$1" "$2" 2>/dev/null; }
init="$work/init.safetensors"
ember_json=""
ember_fused_json=""
if run "$build/train_step_bench" --write-init "$init" --heads 4; then
  ember_json=$(EMBER_ATTENTION=composed "$build/train_step_bench" --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda 2>> "$log" | tail -1)
  ember_fused_json=$(EMBER_ATTENTION=fused "$build/train_step_bench" --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda 2>> "$log" | tail -1)
fi
echo "ember, EMBER_ATTENTION=composed: $ember_json" >> "$log"
echo "ember, EMBER_ATTENTION=fused: $ember_fused_json" >> "$log"

torch_json=""
torch_note="not run"
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >> "$log" 2>&1; then
    torch_json=$("$py" bench/train_step_torch.py --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda 2>> "$log" | tail -1)
    torch_note="torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py)"
    break
  fi
done
[[ -z "$torch_json" && "$torch_note" == "not run" ]] && torch_note="no CUDA build of torch found (python3 and /usr/bin/python3 tried)"
echo "torch: $torch_json" >> "$log"

# ---- 3b. Softmax: the own kernel against cuDNN (the IMDb model's attention-score shapes)
softmax_table="$work/softmax.txt"
"$build/softmax_gpu_bench" > "$softmax_table" 2>> "$log" || echo "softmax_gpu_bench failed" >> "$softmax_table"
cat "$softmax_table" >> "$log"

# ---- 4. The trainer end to end on the shipped small data, GPU and CPU: same losses?
small=(--data tests/data/imdb_small.json --epochs 1 --batch-size 32 --log-every 1000)
t0=$(date +%s)
gpu_train="FAILED"
run "$build/imdb" train "${small[@]}" --device cuda --out "$work/train-gpu" && gpu_train="ok"
run "$build/imdb" train "${small[@]}" --device cpu --out "$work/train-cpu"
train_s=$(( $(date +%s) - t0 ))
loss_gap=$(python3 - "$work/train-gpu/metrics.jsonl" "$work/train-cpu/metrics.jsonl" <<'PY' 2>> "$log"
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"kind": "step"' in l or '"kind":"step"' in l]
g, c = losses(sys.argv[1]), losses(sys.argv[2])
n = min(len(g), len(c))
if n == 0:
    print("n/a"); sys.exit()
gap = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(g[:n], c[:n]))
first = abs(g[0] - c[0]) / max(abs(c[0]), 1e-12)
print(f"{n} steps: first step rel. diff {first:.2e}, largest {gap:.2e} (GPU last loss {g[n-1]:.5f}, CPU {c[n-1]:.5f})")
PY
)
gpu_mem_line=$(grep -h "memory:" "$log" | grep "cuda" | tail -1)

# ---- 5. The table
e_ms=$(json_field "$ember_json" step_ms); e_fwd=$(json_field "$ember_json" forward_ms)
e_peak=$(json_field "$ember_json" peak_gpu_bytes); e_loss=$(json_field "$ember_json" first_loss)
ef_ms=$(json_field "$ember_fused_json" step_ms); ef_fwd=$(json_field "$ember_fused_json" forward_ms)
ef_peak=$(json_field "$ember_fused_json" peak_gpu_bytes); ef_loss=$(json_field "$ember_fused_json" first_loss)
t_ms=$(json_field "$torch_json" step_ms); t_fwd=$(json_field "$torch_json" forward_ms)
t_peak=$(json_field "$torch_json" peak_gpu_bytes); t_loss=$(json_field "$torch_json" first_loss)
mib() { [[ -n "$1" ]] && python3 -c "print(f'{int($1) / 1048576:.1f} MiB')" || echo "-"; }
ratio() { [[ -n "$1" && -n "$2" ]] && python3 -c "print(f'{float($1) / float($2):.2f}x')" || echo "-"; }
total_s=$(( $(date +%s) - start_all ))
{
  echo
  echo "=== gpu-check: $gpu_name, $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git rev-parse --short HEAD 2>/dev/null || echo '?') ==="
  printf "%-38s %s\n" "build (Release, sm_$arch)" "$build_status, ${build_s}s"
  printf "%-38s %s\n" "CUDA tests (ctest -R ^cuda)" "$passed passed, $failed failed, $skipped skipped"
  printf "%-38s %-16s %-16s %-16s %s\n" "" "Ember composed" "Ember fused" "PyTorch (cuda)" "composed / PyTorch, fused / PyTorch, fused / composed"
  printf "%-38s %-16s %-16s %-16s %s\n" "training step, h=4, 32x256 (ms)" "${e_ms:--}" "${ef_ms:--}" "${t_ms:--}" \
    "$(ratio "$e_ms" "$t_ms"), $(ratio "$ef_ms" "$t_ms"), $(ratio "$ef_ms" "$e_ms")"
  printf "%-38s %-16s %-16s %-16s %s\n" "forward pass (ms)" "${e_fwd:--}" "${ef_fwd:--}" "${t_fwd:--}" \
    "$(ratio "$e_fwd" "$t_fwd"), $(ratio "$ef_fwd" "$t_fwd"), $(ratio "$ef_fwd" "$e_fwd")"
  printf "%-38s %-16s %-16s %-16s\n" "peak GPU memory (tensors)" "$(mib "$e_peak")" "$(mib "$ef_peak")" "$(mib "$t_peak")"
  printf "%-38s %-16s %-16s %-16s\n" "first loss, same weights" "${e_loss:--}" "${ef_loss:--}" "${t_loss:--}"
  printf "%-38s %s\n" "attention default" "composed (EMBER_ATTENTION=fused opts in; make fused the default when its tests pass and fused / composed < 1)"
  printf "%-38s %s\n" "PyTorch" "$torch_note"
  printf "%-38s %s\n" "trainer on small data, --device cuda" "$gpu_train (${train_s}s with the CPU run)"
  printf "%-38s %s\n" "GPU vs CPU training losses" "${loss_gap:-n/a}"
  printf "%-38s %s\n" "trainer's GPU memory report" "${gpu_mem_line:-none}"
  echo "softmax, own kernel vs cuDNN (float32):"
  sed 's/^/  /' "$softmax_table"
  printf "%-38s %s\n" "total time" "${total_s}s"
  echo "full log: $log"
} | tee -a "$log"
[[ "$failed" -eq 0 && "$build_status" != "FAILED" && "$gpu_train" == "ok" ]]
