#!/usr/bin/env bash
# The programs bench/gpu-check.sh runs on a GPU, run on the CPU emulator of CUDA with small sizes,
# each also on the CPU where that gives a number to hold the GPU path to:
#   1. train_step_bench: the same weights and batch on cpu and cuda: equal first losses, a step timed,
#      GPU memory reported; the same kernel launches for a batch of 2 as of 4; --cuda-graph replays;
#   2. softmax_gpu_bench --smoke: the own softmax kernel and cuDNN's agree on every shape;
#   3. imdb train --device cuda (a tiny model, one epoch of the shipped small data): finishes, logs
#      GPU memory every epoch, and its step losses follow the CPU run's.
#   4. gemm_peak (the bfloat16 matrix rate for MFU) at n = 64: its checked entries agree with the CPU's,
#      and imdb flops turns its rate and a throughput into an MFU line.
#   tests/gpu_programs_test.sh <imdb_emulated> <train_step_bench_emulated> <softmax_gpu_bench_emulated> <imdb_small.json>
#                              [<gemm_peak_emulated>]
set -u
IMDB=$1
STEP_BENCH=$2
SOFTMAX_BENCH=$3
DATA=$4
GEMM_PEAK=${5:-}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. The training-step benchmark, both devices, the same 2 x 16 batch.
"$STEP_BENCH" --write-init "$OUT/init.safetensors" --heads 4 --batch-size 2 --len 16 || fail "train_step_bench --write-init"
cpu=$("$STEP_BENCH" --init "$OUT/init.safetensors" --heads 4 --steps 1 --warmup 0 --device cpu | tail -n 1) ||
  fail "train_step_bench on the CPU"
gpu=$("$STEP_BENCH" --init "$OUT/init.safetensors" --heads 4 --steps 1 --warmup 0 --device cuda | tail -n 1) ||
  fail "train_step_bench on the (emulated) GPU"
echo "cpu: $cpu"
echo "cuda: $gpu"
python3 - "$cpu" "$gpu" <<'PY' || fail "train_step_bench: the GPU run does not match the CPU run"
import json, sys
cpu, gpu = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert gpu["device"] == "cuda:0", gpu["device"]
assert abs(gpu["first_loss"] - cpu["first_loss"]) <= 1e-5 * (1 + abs(cpu["first_loss"])), (gpu["first_loss"], cpu["first_loss"])
assert gpu["step_ms"] > 0 and gpu["forward_ms"] > 0, gpu
assert gpu["peak_gpu_bytes"] > 0, gpu
print("train_step_bench: first loss %.8f on both devices" % cpu["first_loss"])
PY

# 1b. The launches of a step must not grow with the batch: each kernel and library call (counted by
# the emulator, EMBER_EMULATOR_LAUNCHES=1) as many times for a batch of 2 as for a batch of 4. (A
# loop of cuBLAS calls over the batch, say, would show here.)
"$STEP_BENCH" --write-init "$OUT/init4.safetensors" --heads 4 --batch-size 4 --len 16 || fail "train_step_bench --write-init (batch 4)"
for b in "" 4; do
  EMBER_EMULATOR_LAUNCHES=1 "$STEP_BENCH" --init "$OUT/init$b.safetensors" --heads 4 --steps 1 --warmup 0 --device cuda \
    2> "$OUT/launches$b.txt" > /dev/null || fail "train_step_bench with launch counting"
done
grep -q "kernel launches" "$OUT/launches.txt" || fail "no launch counts printed"
if ! cmp -s "$OUT/launches.txt" "$OUT/launches4.txt"; then
  diff "$OUT/launches.txt" "$OUT/launches4.txt"
  fail "the launches of a step depend on the batch size"
fi
echo "launches for a batch of 2 and of 4 (a forward, a step, a forward): $(head -n 1 "$OUT/launches.txt")"

# 1c. --cuda-graph: after a warm-up step (run op by op, then captured), each timed step is one graph
# launch and the step's uploads, with one wait (the loss read), as the emulator counts them.
graph=$("$STEP_BENCH" --init "$OUT/init.safetensors" --heads 4 --steps 2 --warmup 1 --steps-only --device cuda --cuda-graph |
  tail -n 1) || fail "train_step_bench --cuda-graph"
python3 - "$graph" <<'PY' || fail "train_step_bench --cuda-graph: not one graph launch per step"
import json, sys
r = json.loads(sys.argv[1])
c = r["emulator_counts"]
assert r["cuda_graph"] is True and r["steps"] == 2, r
assert c["graph_launches"] == 2 and c["library_calls"] == 0 and c["host_waits"] == 2, c
print("train_step_bench --cuda-graph: %d work items for 2 replayed steps" % c["work_items"])
PY

# 2. The softmax benchmark: every shape's row of numbers, both differences tiny.
"$SOFTMAX_BENCH" --smoke > "$OUT/softmax.txt" 2>&1 || { cat "$OUT/softmax.txt"; fail "softmax_gpu_bench --smoke"; }
cat "$OUT/softmax.txt"
python3 - "$OUT/softmax.txt" <<'PY' || fail "softmax_gpu_bench: the own kernel and cuDNN disagree, or a shape is missing"
import sys
rows = [line.split() for line in open(sys.argv[1]) if line.startswith(("attention", "short", "wide"))]
assert len(rows) == 4, rows
for row in rows:
    fwd, bwd = float(row[-2]), float(row[-1])
    assert fwd <= 1e-6 and bwd <= 1e-6, row
PY

# 3. The trainer program on the GPU, then on the CPU: the same step losses (to 1e-3, like the
# trainer's own GPU test), and a GPU memory record for the epoch.
tiny=(--data "$DATA" --epochs 1 --dim 32 --heads 2 --layers 1 --ffn 32 --max-len 32 --batch-size 16 --threads 2
      --seed 5 --quiet)
"$IMDB" train "${tiny[@]}" --device cuda --out "$OUT/gpu" > "$OUT/gpu.log" 2>&1 || { cat "$OUT/gpu.log"; fail "imdb train --device cuda"; }
"$IMDB" train "${tiny[@]}" --device cpu --out "$OUT/cpu" > "$OUT/cpu.log" 2>&1 || { cat "$OUT/cpu.log"; fail "imdb train --device cpu"; }
python3 - "$OUT/gpu/metrics.jsonl" "$OUT/cpu/metrics.jsonl" <<'PY' || fail "imdb train --device cuda: losses or GPU memory"
import json, sys
def records(path):
    return [json.loads(line) for line in open(path)]
gpu, cpu = records(sys.argv[1]), records(sys.argv[2])
g = [r["loss"] for r in gpu if r.get("kind") == "step"]
c = [r["loss"] for r in cpu if r.get("kind") == "step"]
assert len(g) == len(c) > 0, (len(g), len(c))
worst = max(abs(a - b) for a, b in zip(g, c))
assert worst <= 1e-3, worst
memory = [r for r in gpu if r.get("kind") == "gpu_memory"]
assert len(memory) == 1 and memory[0]["peak_bytes"] > 0, memory
print("imdb train: %d steps, GPU and CPU losses within %.1e; GPU memory logged" % (len(g), worst))
PY

# 4. The bfloat16 matrix rate (bench/gemm_peak.cpp) on a 64 x 64 x 64 product, then the MFU line it feeds.
if [ -n "$GEMM_PEAK" ]; then
  peak=$("$GEMM_PEAK" --n 64 --timings 2 --per-round 2 | tail -n 1) || fail "gemm_peak on the (emulated) GPU: $peak"
  echo "gemm_peak: $peak"
  tflops=$(python3 - "$peak" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["device"] == "cuda:0" and r["n"] == 64 and r["correct"] is True, r
assert r["worst_relative_error"] <= 1e-5 and r["best_ms"] > 0 and r["tflops"] > 0, r
print(r["tflops"])
PY
) || fail "gemm_peak: its result is wrong or incomplete"
  mfu=$("$IMDB" flops --preset gpu-large --tokens-per-s 1000 --peak-tflops "$tflops") || fail "imdb flops"
  echo "$mfu"
  grep -q "^MFU [0-9.]*% of " <<<"$mfu" || fail "imdb flops printed no MFU line"
  "$GEMM_PEAK" --n 0 > /dev/null 2>&1 && fail "gemm_peak --n 0 was accepted"
fi
echo "the GPU programs ran on the emulator"
