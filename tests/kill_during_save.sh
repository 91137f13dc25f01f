#!/usr/bin/env bash
# Crash safety of checkpoints: start the trainer with a checkpoint after every step, kill it at
# random moments (SIGKILL, many of them while it is writing checkpoint.safetensors; every fourth a
# SIGTERM, which must stop it at a step boundary with a checkpoint and no temporary file), and after
# every kill check that the checkpoint left behind loads completely (`imdb check`, which loads it as
# --resume does). Each restart resumes from it. More kills are forced to land mid-write of the
# checkpoint, of model.safetensors, of report.html and of vocab.txt (a fault-injection pause halfway
# through the file), halfway through a line of metrics.jsonl and halfway through an epoch's
# evaluation (EMBER_FAULT_PAUSE, core/file_io.h). Finally the run is let finish, and it must leave
# exactly what an uninterrupted run with the same settings leaves: the same checkpoint and model
# files (byte for byte), vocab.txt, every line of metrics.jsonl (steps and evaluations; all but the
# timing and memory figures), the report's epoch table (but the times) and the final test accuracy.
#   tests/kill_during_save.sh <imdb binary> <imdb_small.json> [kills (default 20)] [seed] [trainer flags...]
# The trainer flags come after the script's own (a flag given twice keeps its last value): e.g.
# --device cuda --dim 16 --max-len 32 for the emulated GPU (imdb_emulated, ctest emulated_kill_during_save).
set -u
IMDB=$1
DATA=$2
KILLS=${3:-20}
RANDOM=${4:-$$}
shift $(( $# < 4 ? $# : 4 ))
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# 13 steps an epoch on the small data; 4 epochs so that kills land mid-run. Width 32 makes the
# checkpoint (model + AdamW moments) a few MB, so that writing it takes a good part of each step.
args=(--data "$DATA" --dim 32 --heads 2 --layers 1 --ffn 32 --max-len 64 --batch-size 16 --epochs 4
      --threads 2 --seed 3 --save-every 1 --quiet "$@")

fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s.%N)
"$IMDB" train "${args[@]}" --out "$OUT/whole" >"$OUT/whole.log" 2>&1 || { cat "$OUT/whole.log"; fail "uninterrupted run"; }
whole_seconds=$(echo "$(date +%s.%N) - $start" | bc)
echo "uninterrupted run: $(grep -c '"kind":"step"' "$OUT/whole/metrics.jsonl") steps in ${whole_seconds}s"

run="$OUT/killed"
last_step=-1
mid_save=0
forced=0

# The first kill lands mid-write of vocab.txt (the run's first file): the run starts over from nothing.
EMBER_FAULT_PAUSE_MID_WRITE=vocab.txt:5000 "$IMDB" train "${args[@]}" --out "$run" >"$OUT/forced.log" 2>&1 &
pid=$!
partial=""
for _ in $(seq 1 1500); do
  partial=$(find "$run" -maxdepth 1 -name 'vocab.txt.tmp.*' -size +0 2>/dev/null | head -n 1)
  [ -n "$partial" ] && break
  sleep 0.02
done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ -n "$partial" ] || { tail -5 "$OUT/forced.log"; fail "forced kill mid-write of vocab.txt: the write did not begin within 30 s"; }
[ ! -e "$run/checkpoint.safetensors" ] || fail "forced kill mid-write of vocab.txt: a checkpoint before the vocabulary"
rm -f "$run"/*.tmp.*
echo "forced kill mid-write of vocab.txt (no checkpoint yet: the run starts over)"
forced=$((forced + 1))
terms=0  # SIGTERMs the trainer handled (checkpoint at a step boundary, exit 143)
checked=0
i=0
attempts=0
# Kills come at a random moment in the first 60% of a run's time. The uninterrupted run's time is
# a first guess (measured while other tests may load the machine); whenever a run finishes before
# its kill, the window shrinks to 60% of how long that run took.
limit_ms=$(echo "$whole_seconds * 600 / 1" | bc)
while [ "$i" -lt "$KILLS" ] && [ "$attempts" -lt $((KILLS * 4)) ]; do
  attempts=$((attempts + 1))
  started=$(date +%s%N)
  resume=()
  [ -f "$run/checkpoint.safetensors" ] && resume=(--resume)
  "$IMDB" train "${args[@]}" "${resume[@]}" --out "$run" >"$OUT/killed.log" 2>&1 &
  pid=$!
  signal=KILL
  [ $((i % 4)) -eq 3 ] && signal=TERM
  if [ "$signal" = TERM ]; then
    # A SIGTERM is for the training loop: wait until this run has logged a step (start-up takes
    # most of a short run's time, so a random moment would often land before the first step), then
    # a random 0-30 ms more.
    logged=$(grep -c '"kind":"step"' "$run/metrics.jsonl" 2>/dev/null || true)
    waited_ms=0
    while [ "$waited_ms" -lt 30000 ] && kill -0 "$pid" 2>/dev/null &&
          [ "$(grep -c '"kind":"step"' "$run/metrics.jsonl" 2>/dev/null || true)" -le "${logged:-0}" ]; do
      sleep 0.005; waited_ms=$((waited_ms + 5))
    done
    extra_ms=$((RANDOM % 30))
    delay_ms=$((waited_ms + extra_ms))
    sleep "$(echo "scale=3; $extra_ms / 1000" | bc)"
  else
    # A random moment: 20 ms .. 20 ms + the window.
    [ "$limit_ms" -gt 20 ] || limit_ms=20
    delay_ms=$((20 + RANDOM % limit_ms))
    sleep "$(echo "scale=3; $delay_ms / 1000" | bc)"
  fi
  kill -$signal "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  code=$?
  if [ "$signal" = TERM ] && [ "$code" -eq 143 ]; then
    # Stopped at a step boundary (or, before training began, by the default action): nothing
    # half-written either way.
    ls "$run" | grep -q '\.tmp\.' && fail "kill $i: SIGTERM left a temporary file: $(ls "$run")"
    grep -q "stopped by SIGTERM at step" "$OUT/killed.log" && terms=$((terms + 1))
    code=137
  fi
  if [ "$code" -ne 137 ]; then
    # Finished before the kill (or failed): it must have succeeded.
    [ "$code" -eq 0 ] || { cat "$OUT/killed.log"; fail "kill $i: trainer exited with $code before the kill"; }
    took_ms=$(( ($(date +%s%N) - started) / 1000000 ))
    [ $((took_ms * 6 / 10)) -ge "$limit_ms" ] || limit_ms=$((took_ms * 6 / 10))
    echo "(the run had finished before the kill, in ${took_ms} ms; starting it over, kills now within ${limit_ms} ms)"
    rm -rf "$run"
    last_step=-1
    continue
  fi
  i=$((i + 1))
  # A temporary file left behind means the kill landed while a checkpoint was being written.
  leftovers=$(ls "$run" 2>/dev/null | grep -c '\.tmp\.' || true)
  [ "$leftovers" -gt 0 ] && mid_save=$((mid_save + 1))
  rm -f "$run"/*.tmp.* 2>/dev/null
  if [ -f "$run/checkpoint.safetensors" ]; then
    out=$("$IMDB" check --run "$run" 2>&1) || fail "kill $i (after ${delay_ms} ms): the checkpoint does not load: $out"
    step=$(sed -n 's/^checkpoint OK: step \([0-9]*\).*/\1/p' <<<"$out")
    [ -n "$step" ] || fail "kill $i: unexpected output: $out"
    [ "$step" -ge "$last_step" ] || fail "kill $i: checkpoint went back from step $last_step to $step"
    last_step=$step
    checked=$((checked + 1))
    echo "kill $i after ${delay_ms} ms: checkpoint at step $step loads$([ "$leftovers" -gt 0 ] && echo ' (killed mid-save)')"
  else
    echo "kill $i after ${delay_ms} ms: no checkpoint yet"
  fi
done

# Kills that land mid-write for sure: EMBER_FAULT_PAUSE_MID_WRITE makes the trainer stop halfway
# through writing the checkpoint (core/file_io.cpp); the kill comes once the temporary file has bytes.
# The checkpoint in place must still be the last complete one, and load.
checkpoint_step() { "$IMDB" check --run "$run" 2>/dev/null | sed -n 's/^checkpoint OK: step \([0-9]*\).*/\1/p'; }
for attempt in 1 2 3; do
  before=$(checkpoint_step)
  if [ -z "$before" ] || [ "$before" -ge 52 ]; then
    # No checkpoint to protect, or the run is complete: start over and stop once one is written.
    rm -rf "$run"
    "$IMDB" train "${args[@]}" --out "$run" >"$OUT/forced.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1500); do [ -f "$run/checkpoint.safetensors" ] && break; sleep 0.02; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -f "$run"/*.tmp.*
    before=$(checkpoint_step)
    [ -n "$before" ] || { tail -5 "$OUT/forced.log"; fail "forced kill $attempt: no checkpoint to start from"; }
  fi
  resume=(--resume)
  EMBER_FAULT_PAUSE_MID_WRITE=checkpoint.safetensors:5000 "$IMDB" train "${args[@]}" "${resume[@]}" --out "$run" >"$OUT/forced.log" 2>&1 &
  pid=$!
  partial=""
  for _ in $(seq 1 1500); do  # up to 30 s for the first write to begin
    partial=$(find "$run" -maxdepth 1 -name 'checkpoint.safetensors.tmp.*' -size +0 2>/dev/null | head -n 1)
    [ -n "$partial" ] && break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -n "$partial" ] || { tail -5 "$OUT/forced.log"; ls "$run"; fail "forced kill $attempt: no checkpoint write began within 30 s"; }
  [ -f "$partial" ] || fail "forced kill $attempt: the half-written $partial was renamed before the kill"
  rm -f "$run"/*.tmp.*
  out=$("$IMDB" check --run "$run" 2>&1) || fail "forced kill $attempt: the previous checkpoint does not load: $out"
  step=$(sed -n 's/^checkpoint OK: step \([0-9]*\).*/\1/p' <<<"$out")
  [ "$step" = "$before" ] || fail "forced kill $attempt: the checkpoint in place is step $step, expected the previous one ($before)"
  echo "forced kill $attempt mid-write of the checkpoint: the previous one (step $step) is in place and loads"
  forced=$((forced + 1))
done

# Kills halfway through a line of metrics.jsonl (a step's) and halfway through an epoch's evaluation
# (EMBER_FAULT_PAUSE: the trainer says "fault pause: <point>" and sleeps; the kill comes then). The
# checkpoint in place must load and not go back; the resumed run drops the cut line.
for point in metrics.jsonl evaluation; do
  before=$(checkpoint_step)
  EMBER_FAULT_PAUSE=$point:5000 "$IMDB" train "${args[@]}" --resume --out "$run" >"$OUT/forced.log" 2>&1 &
  pid=$!
  paused=""
  for _ in $(seq 1 3000); do  # up to 60 s to get there (the evaluation: the epoch's end)
    grep -q "^fault pause: $point" "$OUT/forced.log" && paused=1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -n "$paused" ] || { tail -5 "$OUT/forced.log"; fail "forced kill in $point: the trainer did not get there within 60 s"; }
  if [ "$point" = metrics.jsonl ]; then
    [ -n "$(tail -c 1 "$run/metrics.jsonl")" ] || fail "forced kill in metrics.jsonl: its last line is whole"
  fi
  rm -f "$run"/*.tmp.*
  step=$(checkpoint_step)
  [ -n "$step" ] && [ "$step" -ge "$before" ] || fail "forced kill in $point: the checkpoint (step '$step') does not load or went back from $before"
  echo "forced kill halfway through $([ "$point" = evaluation ] && echo "an evaluation" || echo "a line of $point"): the checkpoint at step $step loads"
  forced=$((forced + 1))
done

# Kills mid-write of metrics.jsonl as a resume rewrites it (its lines up to the checkpoint), of
# model.safetensors (an epoch's end, before its checkpoint) and of report.html (after the last
# checkpoint): the resumed run must still end with the right metrics, model and report.
for file in metrics.jsonl model.safetensors report.html; do
  EMBER_FAULT_PAUSE_MID_WRITE=$file:5000 "$IMDB" train "${args[@]}" --resume --out "$run" >"$OUT/forced.log" 2>&1 &
  pid=$!
  partial=""
  for _ in $(seq 1 3000); do  # up to 60 s for the write to begin
    partial=$(find "$run" -maxdepth 1 -name "$file.tmp.*" -size +0 2>/dev/null | head -n 1)
    [ -n "$partial" ] && break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -n "$partial" ] || { tail -5 "$OUT/forced.log"; fail "forced kill mid-write of $file: the write did not begin within 60 s"; }
  rm -f "$run"/*.tmp.*
  echo "forced kill mid-write of $file (checkpoint at step $(checkpoint_step))"
  forced=$((forced + 1))
done

# Let it finish from the last checkpoint.
"$IMDB" train "${args[@]}" --resume --out "$run" >"$OUT/final.log" 2>&1 || { cat "$OUT/final.log"; fail "final resume"; }
[ "$i" -eq "$KILLS" ] || fail "only $i of $KILLS kills landed before the run finished"
[ "$KILLS" -lt 8 ] || [ "$terms" -gt 0 ] || fail "no SIGTERM landed while the trainer was training"

# Everything the run leaves must be what the uninterrupted run left.
n=$(grep -c '"kind":"step"' "$OUT/whole/metrics.jsonl")
[ "$n" -eq 52 ] || fail "the uninterrupted run logged $n steps, expected 52 (4 epochs of 13)"
for file in checkpoint.safetensors model.safetensors vocab.txt; do
  cmp -s "$OUT/whole/$file" "$run/$file" || fail "$file differs from the uninterrupted run's"
done
accuracy() { grep -o 'final test accuracy [0-9.]*%' "$1"; }
[ -n "$(accuracy "$OUT/whole.log")" ] && [ "$(accuracy "$OUT/whole.log")" = "$(accuracy "$OUT/final.log")" ] ||
  fail "final accuracy: '$(accuracy "$OUT/final.log")', the uninterrupted run's '$(accuracy "$OUT/whole.log")'"
python3 - "$OUT/whole" "$run" <<'EOF' || fail "metrics.jsonl or report.html differ from the uninterrupted run's"
import json, re, sys
timing = {"train_seconds", "eval_seconds", "real_tokens_per_s", "padded_tokens_per_s", "peak_tensor_bytes",
          "peak_rss_bytes", "allocated_bytes", "peak_bytes", "reserved_bytes"}  # (the last three: gpu_memory lines)
def metrics(folder):
    return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in open(folder + "/metrics.jsonl")]
def epoch_table(folder):  # the report's epoch rows: epoch, step, train loss, test accuracy (not the times)
    html = open(folder + "/report.html").read()
    rows = (re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr><td>.*?</tr>", html))
    return [cells[:4] for cells in rows if len(cells) == 6]
whole, killed = sys.argv[1], sys.argv[2]
a, b = metrics(whole), metrics(killed)
if a != b:
    for x, y in zip(a, b):
        if x != y:
            print("first difference:", x, "|", y)
            break
    print(f"{len(a)} lines against {len(b)}")
    sys.exit(1)
epochs = [x for x in a if x["kind"] == "epoch"]
if len(epochs) != 4 or len(epoch_table(whole)) != 4 or epoch_table(whole) != epoch_table(killed):
    print("epoch lines:", len(epochs), "report rows:", epoch_table(whole), epoch_table(killed))
    sys.exit(1)
print(f"metrics.jsonl: the same {len(a)} lines ({len(epochs)} evaluations); report.html: the same epoch table")
EOF
echo "$KILLS kills ($mid_save during a checkpoint write, $checked checkpoints checked, every fourth a SIGTERM, $terms of them handled at a step boundary) and" \
     "$forced forced mid-write kills; the checkpoint, model, vocabulary, all $n steps and 4 evaluations of" \
     "metrics.jsonl, the report's epoch table and the final accuracy equal the uninterrupted run's"
