#!/usr/bin/env bash
# Crash safety of checkpoints: start the trainer with a checkpoint after every step, SIGKILL it at
# random moments (many of them while it is writing checkpoint.safetensors), and after every kill
# check that the checkpoint left behind loads completely (`imdb check`, which loads it as
# --resume does). Each restart resumes from it. Finally the run is let finish, and its per-step
# losses (metrics.jsonl, trimmed to the checkpoint on each resume) must equal, bit for bit (9
# significant digits of a float), those of an uninterrupted run with the same settings. Three more
# kills are forced to land mid-write (a fault-injection pause halfway through each file).
#   tests/kill_during_save.sh <imdb binary> <imdb_small.json> [kills (default 20)] [seed]
set -u
IMDB=$1
DATA=$2
KILLS=${3:-20}
RANDOM=${4:-$$}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# 13 steps an epoch on the small data; 4 epochs so that kills land mid-run. Width 32 makes the
# checkpoint (model + AdamW moments) a few MB, so that writing it takes a good part of each step.
args=(--data "$DATA" --dim 32 --heads 2 --layers 1 --ffn 32 --max-len 64 --batch-size 16 --epochs 4
      --threads 2 --seed 3 --save-every 1 --quiet)

fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s.%N)
"$IMDB" train "${args[@]}" --out "$OUT/whole" >"$OUT/whole.log" 2>&1 || { cat "$OUT/whole.log"; fail "uninterrupted run"; }
whole_seconds=$(echo "$(date +%s.%N) - $start" | bc)
echo "uninterrupted run: $(grep -c '"kind": "step"' "$OUT/whole/metrics.jsonl") steps in ${whole_seconds}s"

run="$OUT/killed"
last_step=-1
mid_save=0
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
  # A random moment: 20 ms .. 20 ms + the window.
  [ "$limit_ms" -gt 20 ] || limit_ms=20
  delay_ms=$((20 + RANDOM % limit_ms))
  sleep "$(echo "scale=3; $delay_ms / 1000" | bc)"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  code=$?
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
forced=0
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

# Let it finish from the last checkpoint.
resume=()
[ -f "$run/checkpoint.safetensors" ] && resume=(--resume)
"$IMDB" train "${args[@]}" "${resume[@]}" --out "$run" >"$OUT/final.log" 2>&1 || { cat "$OUT/final.log"; fail "final resume"; }

losses() { grep '"kind": "step"' "$1" | sed 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/'; }
losses "$OUT/whole/metrics.jsonl" >"$OUT/whole.losses"
losses "$run/metrics.jsonl" >"$OUT/killed.losses"
n=$(wc -l <"$OUT/whole.losses")
[ "$n" -eq 52 ] || fail "the uninterrupted run logged $n steps, expected 52 (4 epochs of 13)"
if ! cmp -s "$OUT/whole.losses" "$OUT/killed.losses"; then
  diff "$OUT/whole.losses" "$OUT/killed.losses" | head -10
  fail "the resumed run's step losses differ from the uninterrupted run's"
fi
[ "$i" -eq "$KILLS" ] || fail "only $i of $KILLS kills landed before the run finished"
echo "$KILLS random kills ($mid_save during a checkpoint write, $checked checkpoints checked) and $forced forced mid-write kills; all $n step losses equal the uninterrupted run's"
