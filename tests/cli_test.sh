#!/usr/bin/env bash
# The imdb program end to end on the shipped small data: train, eval, predict, report, resume,
# and bad input (flags, files) giving usage or a clear error and a non-zero exit.
set -u
IMDB=$1
DATA=$2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fails=0
expect() {  # expect <description> <wanted exit> <text the output must contain> -- command...
  local what=$1 want=$2 text=$3; shift 4
  local got out
  out=$("$@" 2>&1); got=$?
  if [ "$got" != "$want" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: $what (exit $got, wanted $want; output must contain '$text')"; echo "$out" | tail -5; fails=$((fails+1))
  else
    echo "ok: $what"
  fi
}
small=(--data "$DATA" --dim 16 --heads 2 --layers 1 --ffn 32 --max-len 64 --batch-size 16 --quiet)
expect "train on the small data" 0 "final test accuracy" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/run"
expect "eval a saved run" 0 "test accuracy" -- "$IMDB" eval --run "$OUT/run" --data "$DATA"
expect "predict from text" 0 "probability positive" -- "$IMDB" predict --run "$OUT/run" --text "a wonderful film"
echo "an awful, boring film" > "$OUT/review.txt"
expect "predict from a file" 0 "probability positive" -- "$IMDB" predict --run "$OUT/run" --file "$OUT/review.txt"
expect "rebuild the report" 0 "report.html" -- "$IMDB" report --run "$OUT/run" --data "$DATA"
grep -q 'class="heatmap"' "$OUT/run/report.html" || { echo "FAIL: report.html has no heat maps"; fails=$((fails+1)); }
mkdir -p "$OUT/blocked/report.html"  # a folder where the page should go: writing it fails
expect "a report that cannot be written is a warning" 0 "warning: could not write" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/blocked"
expect "report needs a run" 2 "exactly one of --run or --compare" -- "$IMDB" report
expect "compare page of no runs" 1 "no finished runs" -- "$IMDB" report --compare "$OUT/none" --data "$DATA"
expect "stop part-way" 0 "trained 3 steps" -- "$IMDB" train "${small[@]}" --epochs 2 --stop-after 3 --out "$OUT/part"
expect "report of a run stopped before its first epoch ended (checkpoint only)" 0 "report.html" -- "$IMDB" report --run "$OUT/part" --data "$DATA"
expect "resume" 0 "final test accuracy" -- "$IMDB" train "${small[@]}" --epochs 2 --resume --out "$OUT/part"
expect "resume with other settings" 1 "written with other settings" -- "$IMDB" train "${small[@]}" --epochs 3 --resume --out "$OUT/part"
expect "help" 0 "Usage: imdb" -- "$IMDB" --help
expect "unknown command" 2 "unknown command 'fly'" -- "$IMDB" fly
expect "unknown flag" 2 "unknown flag --hedas" -- "$IMDB" train --hedas 4
expect "bad number" 2 "--lr expects a number, got 'fast'" -- "$IMDB" train --lr fast
expect "heads not dividing dim" 2 "--dim 128 is not divisible by --heads 3" -- "$IMDB" train --heads 3
expect "bad device" 2 "unknown device 'tpu'" -- "$IMDB" train --device tpu
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  expect "train on the GPU (reports GPU memory)" 0 "MiB peak" -- "$IMDB" train --data "$DATA" --dim 16 --heads 2 --layers 1 \
    --ffn 32 --max-len 64 --batch-size 16 --log-every 1000 --epochs 1 --device cuda --out "$OUT/gpu"
else  # no GPU: a clear error, raised before the (here missing) data is even looked for
  expect "no GPU for --device cuda" 1 "no CUDA device is available" -- "$IMDB" train --device cuda --data /nonexistent.json --out "$OUT/g"
fi
expect "missing data file" 1 "/nonexistent.json" -- "$IMDB" train --data /nonexistent.json --out "$OUT/x"
printf '[{"t": "good", "s": 1}, {"t": "bad"' > "$OUT/broken.json"
expect "malformed data file" 1 "broken.json" -- "$IMDB" train --data "$OUT/broken.json" --out "$OUT/y"
expect "unwritable output folder, before loading data" 1 "cannot create output folder '/proc/ember-no/run'" -- "$IMDB" train --data /nonexistent.json --out /proc/ember-no/run
expect "check a checkpoint" 0 "checkpoint OK: step 26" -- "$IMDB" check --run "$OUT/part"
expect "check a missing checkpoint" 1 "checkpoint.safetensors" -- "$IMDB" check --run "$OUT/none"
expect "missing run" 1 "model.safetensors" -- "$IMDB" predict --run "$OUT/none" --text hi
head -c 100 "$OUT/run/model.safetensors" > "$OUT/run/cut.safetensors" && mv "$OUT/run/cut.safetensors" "$OUT/run/model.safetensors"
expect "corrupt checkpoint" 1 "model.safetensors" -- "$IMDB" predict --run "$OUT/run" --text hi
expect "predict needs a review" 2 "exactly one of --text or --file" -- "$IMDB" predict --run "$OUT/run"
echo "$((27 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
