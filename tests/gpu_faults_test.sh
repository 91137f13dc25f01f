#!/usr/bin/env bash
# GPU faults, on the CPU emulator of CUDA (tests/cuda_emulator/), with a tiny model:
#   1. out of GPU memory (EMBER_EMULATED_MEMORY_MIB): at the start, and mid-run after a resume, is
#      "out of GPU memory on cuda:0: asked for ... free", never a raw CUDA error or an abort, and the
#      last checkpoint stays intact: the run resumed with the memory it needs ends as one that never
#      failed (model.safetensors byte for byte);
#   2. an asynchronous kernel fault (EMBER_EMULATOR_FAULT=<kernel>:<k>) in the optimiser's kernel, in a
#      forward kernel replayed in a CUDA graph, and during the epoch's evaluation: the run stops naming
#      the kernel, the checkpoint before the fault is the one an uninterrupted run wrote at that step
#      (byte for byte), and the resumed run ends as one that never failed;
#   3. checkpoints moved between the CPU and the GPU: one written on the CPU resumes on the GPU (with
#      --cuda-graph off, as it began), one written on the GPU with --cuda-graph off resumes on the CPU,
#      and one written with CUDA graphs is refused on the CPU with the reason and what to do.
#   tests/gpu_faults_test.sh <imdb_emulated> <imdb> <imdb_small.json>
set -u
EMU=$1
CPU=$2
DATA=$3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
EXPECT_NO_RAW_ERRORS=1
source "$(dirname "$0")/expect.sh"
same() {  # same <description> <file> <file>
  if cmp -s "$2" "$3"; then pass "$1"; else failed "$1 ($2 and $3 differ)"; fi
}
tiny=(--data "$DATA" --dim 16 --heads 2 --layers 1 --ffn 32 --max-len 32 --batch-size 16 --threads 2 --quiet
      --epochs 1 --save-every 1)
start=$(date +%s)

# The uninterrupted run each recovered one must equal, and its checkpoint at step 4 (--stop-after).
expect "uninterrupted GPU run" 0 "trained 13 steps" -- "$EMU" train "${tiny[@]}" --device cuda --out "$OUT/ref"
expect "GPU run stopped at step 4" 0 "stopped after 4 of 13 steps" -- "$EMU" train "${tiny[@]}" --device cuda --stop-after 4 --out "$OUT/ref4"
expect "GPU run stopped at step 2" 0 "stopped after 2 of 13 steps" -- "$EMU" train "${tiny[@]}" --device cuda --stop-after 2 --out "$OUT/ref2"

# --zero on one GPU process: a clear error before training, not the optimiser's check.
expect "--zero on one GPU process is refused up front" 1 "on one GPU process there is nothing to shard" -- \
  "$EMU" train "${tiny[@]}" --device cuda --zero --out "$OUT/zero1"
expect "pretrain --zero on one GPU process is refused up front" 1 "on one GPU process there is nothing to shard" -- \
  "$EMU" pretrain "${tiny[@]}" --steps 2 --device cuda --zero --out "$OUT/zero1-pre"

# 1. Out of GPU memory.
expect "a model that does not fit: what was asked for and what is free" 1 "of 1048576 bytes free" -- \
  env EMBER_EMULATED_MEMORY_MIB=1 "$EMU" train "${tiny[@]}" --device cuda --out "$OUT/oom-start"
grep -q "^error: out of GPU memory on cuda:0: asked for [0-9]* bytes" <<<"$out" &&
  pass "out of memory names the bytes asked for" || failed "out of memory does not name the bytes asked for: $out"
cp -r "$OUT/ref2" "$OUT/oom"
# 3 MiB: the model and the steps fit without CUDA graphs (their capture runs out: op by op), the
# evaluation's batches of 64 do not.
expect "out of memory mid-run, after a resume" 1 "out of GPU memory on cuda:0: asked for" -- \
  env EMBER_EMULATED_MEMORY_MIB=3 "$EMU" train "${tiny[@]}" --device cuda --resume --out "$OUT/oom"
expect "the checkpoint after running out of memory loads" 0 "checkpoint OK: step 12 of 13" -- "$EMU" check --run "$OUT/oom"
expect "resumed with the memory it needs" 0 "trained 13 steps" -- "$EMU" train "${tiny[@]}" --device cuda --resume --out "$OUT/oom"
same "out of memory, resumed: the model of the uninterrupted run" "$OUT/ref/model.safetensors" "$OUT/oom/model.safetensors"

# 2. An asynchronous kernel fault: the optimiser's kernel in step 5 (step 2 on is a graph replay), a
# forward kernel in step 3, and a forward kernel of the evaluation (3 per step, 13 steps: the 40th).
for fault in 'adam_kernel<T>:5' 'layer_norm_forward_warp_kernel:7' 'layer_norm_forward_warp_kernel:40'; do
  kernel=${fault%:*}
  dir="$OUT/fault-${kernel%%<*}-${fault##*:}"
  expect "fault $fault stops the run naming the kernel" 1 "error: a GPU kernel failed: unspecified launch failure (emulator: kernel $kernel: a fault injected" -- \
    env EMBER_EMULATOR_FAULT="$fault" "$EMU" train "${tiny[@]}" --device cuda --out "$dir"
  case $fault in
    adam*) same "fault $fault: the checkpoint is the uninterrupted run's at step 4" "$OUT/ref4/checkpoint.safetensors" "$dir/checkpoint.safetensors" ;;
    *:7) same "fault $fault: the checkpoint is the uninterrupted run's at step 2" "$OUT/ref2/checkpoint.safetensors" "$dir/checkpoint.safetensors" ;;
    *) expect "fault $fault: the checkpoint before the evaluation loads" 0 "checkpoint OK: step 12 of 13" -- "$EMU" check --run "$dir" ;;
  esac
  [ ! -e "$dir/model.safetensors" ] && pass "fault $fault: no model file written" || failed "fault $fault: a model file was written"
  expect "fault $fault: resumed" 0 "trained 13 steps" -- "$EMU" train "${tiny[@]}" --device cuda --resume --out "$dir"
  same "fault $fault, resumed: the model of the uninterrupted run" "$OUT/ref/model.safetensors" "$dir/model.safetensors"
done

# 3. Checkpoints between the CPU and the GPU.
expect "CPU run stopped at step 3" 0 "stopped after 3 of 13 steps" -- "$CPU" train "${tiny[@]}" --stop-after 3 --out "$OUT/from-cpu"
expect "a CPU checkpoint resumes on the GPU (graphs off, as it began)" 0 "trained 13 steps" -- \
  "$EMU" train "${tiny[@]}" --device cuda --cuda-graph off --resume --out "$OUT/from-cpu"
expect "GPU run without graphs stopped at step 3" 0 "stopped after 3 of 13 steps" -- \
  "$EMU" train "${tiny[@]}" --device cuda --cuda-graph off --stop-after 3 --out "$OUT/from-gpu"
expect "a GPU checkpoint (graphs off) resumes on the CPU" 0 "trained 13 steps" -- "$CPU" train "${tiny[@]}" --resume --out "$OUT/from-gpu"
expect "a GPU checkpoint with CUDA graphs is refused on the CPU, saying why and what to do" 1 \
  "was written with CUDA graphs on (cuda_graph), and this run has them off: a run keeps the setting it began with (resume it on a GPU" -- \
  "$CPU" train "${tiny[@]}" --resume --out "$OUT/ref2"
expect "a CPU checkpoint on the GPU with graphs on by default is refused, saying what to add" 1 \
  "add --cuda-graph off" -- "$EMU" train "${tiny[@]}" --device cuda --resume --out "$OUT/from-cpu"

echo "$passes passed, $fails failed in $(( $(date +%s) - start )) s"
[ "$fails" -eq 0 ]
