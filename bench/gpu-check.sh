#!/usr/bin/env bash
# One script, one shot, for a machine with an NVIDIA GPU (docs/cuda.md, "The first GPU run"): prints
# the environment first (driver, GPU, nvcc, cuDNN, torch), builds Ember (Release, CUDA, one
# architecture; it stops if CMake built without CUDA), runs every test that uses a GPU (ctest -L gpu,
# a short timeout each) and reruns the failed ones with synchronous launches (CUDA_LAUNCH_BLOCKING=1,
# EMBER_CUDA_SYNC=1: the error then names the kernel), times the IMDb recipe's training step on the
# GPU (Ember with the composed attention and with the fused one; PyTorch eager and torch.compile on
# the same GPU, each at its defaults), trains the recipe on the shipped small data on the GPU and on
# the CPU, and prints a table: tests, ms per step and the ratios, peak GPU memory, GPU vs CPU losses.
# Meant to finish within 8 minutes on one H200 with 16 cores, build included (not yet measured).
#
# Usage: bench/gpu-check.sh [--steps S] [--build-dir DIR] [--skip-build]
#   --steps S        timed training steps per run, after 3 warm-up ones (default 20)
#   --build-dir DIR  where to build (default build-gpu)
#   --skip-build     use what DIR already holds
# Environment: OUT (a folder: every log is written there, 7 files; default runs/gpu-check/<UTC time>),
# EMBER_CUDA_ARCHITECTURES (default 90: H100/H200; 80 for an A100), JOBS (default nproc).
# Exit status 0 only when the build, every GPU test and the GPU training run passed.
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
stamp=$(date -u +%Y%m%dT%H%M%SZ)
logs="${OUT:-$repo/runs/gpu-check/$stamp}"
mkdir -p "$logs" "$build"
logs="$(cd "$logs" && pwd)"
work="$(cd "$build" && pwd)/gpu-check-work"  # the runs' own files (not logs): kept out of $OUT
rm -rf "$work" && mkdir -p "$work"
# The logs, at most 8 files in $OUT:
log="$logs/gpu-check.log"          # everything below, in order, and the table
build_log="$logs/build.log"        # CMake's configure and build
ctest_log="$logs/ctest.log"        # the GPU tests
sync_log="$logs/ctest-sync.log"    # the failed ones again, with synchronous launches
bench_log="$logs/bench.log"        # the step benchmarks (Ember, PyTorch) and the softmax benchmark
train_log="$logs/train.log"        # the trainer on the small data, GPU and CPU
table="$logs/table.txt"            # the table alone
: > "$log"
say() { echo "$*" | tee -a "$log"; }  # to the terminal and the main log
start_all=$(date +%s)
elapsed() { echo $(( $(date +%s) - start_all ))s; }

# ---- 0. The environment, before anything can fail
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
say "gpu-check $stamp, git $(git rev-parse --short HEAD 2>/dev/null || echo '?'), logs in $logs"
gpu_name="none"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >> "$log" 2>&1; then
  gpu_name=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)
  say "GPU: $gpu_name; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  nvidia-smi >> "$log" 2>&1
else
  say "GPU: none (nvidia-smi missing or failing)"
fi
say "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'not found')"
say "cmake: $(cmake --version 2>/dev/null | head -1); $(nproc) cores"
# cuDNN: /usr/local/cuda's, else the nvidia-cudnn pip package's (CUDNN_ROOT for CMake).
if [[ -z "${CUDNN_ROOT:-}" && ! -f /usr/local/cuda/include/cudnn.h ]]; then
  cudnn_dir=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])" 2>/dev/null || true)
  if [[ -n "$cudnn_dir" && -f "$cudnn_dir/include/cudnn.h" ]]; then
    export CUDNN_ROOT="$cudnn_dir" LD_LIBRARY_PATH="$cudnn_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
cudnn_header=""
for h in "${CUDNN_ROOT:-/nonexistent}/include/cudnn_version.h" /usr/local/cuda/include/cudnn_version.h /usr/include/cudnn_version.h \
         /usr/include/x86_64-linux-gnu/cudnn_version_v9.h; do
  [[ -f "$h" ]] && { cudnn_header="$h"; break; }
done
if [[ -n "$cudnn_header" ]]; then
  say "cuDNN: $(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{v = v (v ? "." : "") $3} END {print v}' "$cudnn_header") ($cudnn_header)"
else
  say "cuDNN: not found (the build works without it; the cuDNN softmax is then skipped)"
fi
torch_py=""
for py in python3 /usr/bin/python3; do
  command -v "$py" >/dev/null || continue
  info=$("$py" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda, 'available' if torch.cuda.is_available() else 'unavailable', 'cuDNN', torch.backends.cudnn.version(), 'compile' if hasattr(torch, 'compile') else 'no-compile')" 2>/dev/null) || continue
  say "torch ($py): $info"
  [[ "$info" == *" available "* ]] && { torch_py="$py"; break; }
done
[[ -n "$torch_py" ]] || say "torch: no CUDA build of torch found (python3 and /usr/bin/python3 tried): PyTorch is not timed"
if [[ "$gpu_name" == "none" ]]; then
  say "no NVIDIA GPU here: nothing to check"
  exit 1
fi

# ---- 1. Build (only the targets used here)
# C++ dependencies carried in .deps/ (scripts/bundle-gpu-deps.sh) when the image lacks them.
if [[ -d .deps/usr ]]; then
  export CMAKE_PREFIX_PATH="$repo/.deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$repo/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CPATH="$repo/.deps/usr/include${CPATH:+:$CPATH}"
  say "using the dependencies in .deps/"
fi
jobs=${JOBS:-$(nproc)}
arch=${EMBER_CUDA_ARCHITECTURES:-90}
build_status="skipped"
t0=$(date +%s)
: > "$build_log"
if [[ $skip_build -eq 0 ]]; then
  if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_CUDA_EMULATOR=OFF \
       "-DEMBER_CUDA_ARCHITECTURES=$arch" >> "$build_log" 2>&1; then
    if ! grep -q "CUDA backend ON" "$build_log"; then
      say "build: CMake configured WITHOUT the CUDA backend (no nvcc or cuBLAS found?): see $build_log"
      grep -E "CUDA|cuBLAS|cuDNN" "$build_log" | tail -5 | tee -a "$log"
      exit 1
    fi
    if cmake --build "$build" -j "$jobs" --target ember_tests train_step_bench imdb softmax_gpu_bench >> "$build_log" 2>&1; then
      build_status="ok"
    else
      build_status="FAILED"
    fi
  else
    build_status="FAILED (configure)"
  fi
fi
build_s=$(( $(date +%s) - t0 ))
say "build: $build_status (${build_s}s, sm_$arch, -j$jobs) [$(elapsed)]"
if [[ "$build_status" == FAILED* ]]; then
  grep -E "error|Error" "$build_log" | head -20 | tee -a "$log"
  say "the build failed: see $build_log"
  exit 1
fi
if [[ -f "$build/CMakeCache.txt" ]] && ! grep -q "CUDA backend ON" "$build_log" && [[ $skip_build -eq 1 ]]; then
  grep -q "^CMAKE_CUDA_COMPILER:.*nvcc" "$build/CMakeCache.txt" || { say "$build was configured without CUDA"; exit 1; }
fi

# ---- 2. The tests that use a GPU (label gpu), 120 s each at most; the failed ones again with
# synchronous launches, so that an asynchronous error is reported at the kernel that raised it.
t0=$(date +%s)
ctest --test-dir "$build" -L '^gpu$' -j 4 --output-on-failure --timeout 120 > "$ctest_log" 2>&1
tests_s=$(( $(date +%s) - t0 ))
passed=$(grep -cE "Test +#[0-9]+: .* Passed" "$ctest_log")
# ctest's closing list names every test that did not pass: skipped ones say (Skipped), the rest failed.
failed=$(grep -E "^\s+[0-9]+ - " "$ctest_log" | grep -cv "(Skipped)$")
skipped=$(grep -cE "\*\*\*Skipped|Not Run" "$ctest_log")
say "GPU tests: $passed passed, $failed failed, $skipped skipped (${tests_s}s) [$(elapsed)]"
grep -E "^\s+[0-9]+ - " "$ctest_log" | grep -v "(Skipped)$" | sed 's/^\s*/  failed: /' | tee -a "$log"
sync_note="none failed"
if [[ "$failed" -gt 0 ]]; then
  CUDA_LAUNCH_BLOCKING=1 EMBER_CUDA_SYNC=1 ctest --test-dir "$build" --rerun-failed --output-on-failure --timeout 120 \
    > "$sync_log" 2>&1
  sync_note="$(grep -E "tests passed" "$sync_log" | tail -1) (synchronous launches; see $sync_log)"
  say "rerun of the failed tests: $sync_note"
else
  echo "no GPU test failed: nothing rerun" > "$sync_log"
fi

# ---- 3. One training step of the recipe's model (h = 4, 32 x 256, no padding): Ember with the
# composed attention (the default) and the fused kernels; PyTorch eager and torch.compile, TF32
# off on both sides, AdamW at PyTorch's default (foreach / fused as it picks).
json_field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d.get(sys.argv[2], ''))" "$1" "$2" 2>/dev/null; }
init="$work/init.safetensors"
: > "$bench_log"
bench() { echo "+ $*" >> "$bench_log"; timeout 180 "$@" 2>> "$bench_log" | tail -1 | tee -a "$bench_log"; }
ember_json="" ember_fused_json="" torch_json="" torch_compiled_json=""
if timeout 60 "$build/train_step_bench" --write-init "$init" --heads 4 >> "$bench_log" 2>&1; then
  ember_json=$(EMBER_ATTENTION=composed bench "$build/train_step_bench" --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda)
  ember_fused_json=$(EMBER_ATTENTION=fused bench "$build/train_step_bench" --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda)
fi
torch_note="not run (no CUDA build of torch)"
compile_note="not run"
if [[ -n "$torch_py" ]]; then
  torch_json=$(bench "$torch_py" bench/train_step_torch.py --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda)
  torch_note="torch $("$torch_py" -c 'import torch; print(torch.__version__)' 2>/dev/null), eager"
  if "$torch_py" -c "import torch, sys; sys.exit(0 if hasattr(torch, 'compile') else 1)" 2>/dev/null; then
    torch_compiled_json=$(bench "$torch_py" bench/train_step_torch.py --init "$init" --heads 4 --steps "$steps" --warmup 3 --device cuda --compile)
    compile_note=$([[ -n "$(json_field "$torch_compiled_json" step_ms)" ]] && echo "ok" || echo "failed (see $bench_log)")
  else
    compile_note="this torch has no torch.compile"
  fi
fi
say "step benchmarks done [$(elapsed)]"
softmax_table="$work/softmax.txt"
echo "+ softmax_gpu_bench" >> "$bench_log"
timeout 120 "$build/softmax_gpu_bench" > "$softmax_table" 2>> "$bench_log" || echo "softmax_gpu_bench failed" >> "$softmax_table"
cat "$softmax_table" >> "$bench_log"

# ---- 4. The trainer end to end on the shipped small data, GPU and CPU: same losses?
small=(--data tests/data/imdb_small.json --epochs 1 --batch-size 32 --log-every 1000)
t0=$(date +%s)
gpu_train="FAILED"
: > "$train_log"
echo "+ imdb train --device cuda" >> "$train_log"
timeout 240 "$build/imdb" train "${small[@]}" --device cuda --out "$work/train-gpu" >> "$train_log" 2>&1 && gpu_train="ok"
echo "+ imdb train --device cpu" >> "$train_log"
timeout 240 "$build/imdb" train "${small[@]}" --device cpu --out "$work/train-cpu" >> "$train_log" 2>&1
train_s=$(( $(date +%s) - t0 ))
loss_gap=$(python3 - "$work/train-gpu/metrics.jsonl" "$work/train-cpu/metrics.jsonl" <<'PY' 2>> "$train_log"
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
gpu_mem_line=$(grep -h "memory:" "$train_log" | grep "cuda" | tail -1)
say "trainer runs done [$(elapsed)]"

# ---- 5. The table
e_ms=$(json_field "$ember_json" step_ms); e_fwd=$(json_field "$ember_json" forward_ms)
e_peak=$(json_field "$ember_json" peak_gpu_bytes); e_loss=$(json_field "$ember_json" first_loss)
ef_ms=$(json_field "$ember_fused_json" step_ms); ef_fwd=$(json_field "$ember_fused_json" forward_ms)
ef_peak=$(json_field "$ember_fused_json" peak_gpu_bytes); ef_loss=$(json_field "$ember_fused_json" first_loss)
t_ms=$(json_field "$torch_json" step_ms); t_fwd=$(json_field "$torch_json" forward_ms)
t_peak=$(json_field "$torch_json" peak_gpu_bytes); t_loss=$(json_field "$torch_json" first_loss)
tc_ms=$(json_field "$torch_compiled_json" step_ms); tc_fwd=$(json_field "$torch_compiled_json" forward_ms)
tc_peak=$(json_field "$torch_compiled_json" peak_gpu_bytes); tc_loss=$(json_field "$torch_compiled_json" first_loss)
mib() { [[ -n "$1" ]] && python3 -c "print(f'{int($1) / 1048576:.1f} MiB')" || echo "-"; }
ratio() { [[ -n "$1" && -n "$2" ]] && python3 -c "print(f'{float($1) / float($2):.2f}x')" || echo "-"; }
total_s=$(( $(date +%s) - start_all ))
row() { printf "%-36s %-15s %-15s %-15s %-15s %s\n" "$@"; }
{
  echo
  echo "=== gpu-check: $gpu_name, $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git rev-parse --short HEAD 2>/dev/null || echo '?') ==="
  printf "%-36s %s\n" "build (Release, sm_$arch)" "$build_status, ${build_s}s"
  printf "%-36s %s\n" "GPU tests (ctest -L gpu)" "$passed passed, $failed failed, $skipped skipped"
  printf "%-36s %s\n" "failed ones, synchronous launches" "$sync_note"
  row "" "Ember composed" "Ember fused" "PyTorch eager" "torch.compile" "composed/eager, fused/eager, composed/compiled, fused/composed"
  row "training step, h=4, 32x256 (ms)" "${e_ms:--}" "${ef_ms:--}" "${t_ms:--}" "${tc_ms:--}" \
    "$(ratio "$e_ms" "$t_ms"), $(ratio "$ef_ms" "$t_ms"), $(ratio "$e_ms" "$tc_ms"), $(ratio "$ef_ms" "$e_ms")"
  row "forward pass (ms)" "${e_fwd:--}" "${ef_fwd:--}" "${t_fwd:--}" "${tc_fwd:--}" \
    "$(ratio "$e_fwd" "$t_fwd"), $(ratio "$ef_fwd" "$t_fwd"), $(ratio "$e_fwd" "$tc_fwd"), $(ratio "$ef_fwd" "$e_fwd")"
  row "peak GPU memory (tensors)" "$(mib "$e_peak")" "$(mib "$ef_peak")" "$(mib "$t_peak")" "$(mib "$tc_peak")"
  row "first loss, same weights" "${e_loss:--}" "${ef_loss:--}" "${t_loss:--}" "${tc_loss:--}"
  printf "%-36s %s\n" "attention default" "composed (make fused the default when its tests pass and fused/composed < 1)"
  printf "%-36s %s\n" "PyTorch" "$torch_note; torch.compile: $compile_note"
  printf "%-36s %s\n" "trainer on small data, --device cuda" "$gpu_train (${train_s}s with the CPU run)"
  printf "%-36s %s\n" "GPU vs CPU training losses" "${loss_gap:-n/a}"
  printf "%-36s %s\n" "trainer's GPU memory report" "${gpu_mem_line:-none}"
  echo "softmax, own kernel vs cuDNN (float32):"
  sed 's/^/  /' "$softmax_table"
  printf "%-36s %s\n" "total time" "${total_s}s"
  echo "logs: $logs"
} | tee "$table" | tee -a "$log"
[[ "$failed" -eq 0 && "$build_status" != FAILED* && "$gpu_train" == "ok" ]]
