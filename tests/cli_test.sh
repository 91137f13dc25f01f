#!/usr/bin/env bash
# The imdb program end to end on the shipped small data: train, eval, predict, report, resume,
# and bad input (flags, files, folders, signals, a second trainer) giving usage or a clear error
# and a non-zero exit, without losing or mixing a run's files.
set -u
IMDB=$1
DATA=$2
# python3 reads the run's files below: without it (a minimal system) the test cannot run, and says so (77: skipped).
command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
source "$(dirname "$0")/expect.sh"
small=(--data "$DATA" --dim 16 --heads 2 --layers 1 --ffn 32 --max-len 64 --batch-size 16 --quiet)
expect "train on the small data" 0 "final test accuracy" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/run"
expect "eval a saved run" 0 "test accuracy" -- "$IMDB" eval --run "$OUT/run" --data "$DATA"
expect "eval by whole length" 0 "reviews of 101 or more tokens" -- "$IMDB" eval --run "$OUT/run" --data "$DATA" --by-length 64,100
total=$("$IMDB" eval --run "$OUT/run" --data "$DATA" 2>&1 | head -n 1)  # "test accuracy X% on 200 reviews (...)"
expect "eval by whole length: the buckets' total is the plain eval's" 0 "$total" -- "$IMDB" eval --run "$OUT/run" --data "$DATA" --by-length 64,100
expect "eval by lengths that do not increase" 2 "--by-length: the lengths must increase, got 100,64" -- "$IMDB" eval --run "$OUT/run" --data "$DATA" --by-length 100,64
expect "eval by a length of 0" 2 "--by-length" -- "$IMDB" eval --run "$OUT/run" --data "$DATA" --by-length 0
expect "predict from text" 0 "probability positive" -- "$IMDB" predict --run "$OUT/run" --text "a wonderful film"
expect "a one-dash word that is an option's value is the value" 0 "probability positive" -- "$IMDB" predict --run "$OUT/run" --text "-awful-"
echo "an awful, boring film" > "$OUT/review.txt"
expect "predict from a file" 0 "probability positive" -- "$IMDB" predict --run "$OUT/run" --file "$OUT/review.txt"
# Files whose size reads as 0 (/proc) are read to their end ("basic_string::_M_replace_aux" before).
expect "predict from a /proc file" 0 "probability positive" -- "$IMDB" predict --run "$OUT/run" --file /proc/self/status
expect "a /proc file as --data" 1 "reviews file '/proc/self/status' is not valid JSON" -- "$IMDB" train "${small[@]}" --data /proc/self/status --out "$OUT/proc"
expect "rebuild the report" 0 "report.html" -- "$IMDB" report --run "$OUT/run" --data "$DATA"
grep -q 'class="heatmap"' "$OUT/run/report.html" && pass "report.html has heat maps" || failed "report.html has no heat maps"
mkdir -p "$OUT/blocked/report.html"  # a folder where the page should go: writing it fails
expect "a report that cannot be written is a warning" 0 "warning: could not write" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/blocked"
expect "report needs a run" 2 "exactly one of --run or --compare" -- "$IMDB" report
expect "compare page of no runs" 1 "no finished runs" -- "$IMDB" report --compare "$OUT/none" --data "$DATA"
# metrics.jsonl that is a folder: an error, not an empty report.
mkdir -p "$OUT/dirmetrics" && cp "$OUT/run/model.safetensors" "$OUT/run/vocab.txt" "$OUT/dirmetrics/" && mkdir "$OUT/dirmetrics/metrics.jsonl"
expect "report when metrics.jsonl is a folder" 1 "metrics file '$OUT/dirmetrics/metrics.jsonl' is not a regular file" -- "$IMDB" report --run "$OUT/dirmetrics" --data "$DATA"
[ ! -e "$OUT/dirmetrics/report.html" ] && pass "no empty report written" || failed "an empty report was written"
# A metrics line whose step is 1e300: an error naming the file, line and field, no report drawn from garbage.
mkdir -p "$OUT/hugestep" && cp "$OUT/run/model.safetensors" "$OUT/run/vocab.txt" "$OUT/hugestep/"
{ head -n 2 "$OUT/run/metrics.jsonl"; echo '{"kind": "step", "step": 1e300, "loss": 0.5}'; } > "$OUT/hugestep/metrics.jsonl"
expect "report of a metrics line with step 1e300" 1 "hugestep/metrics.jsonl:3: field 'step' = 1e+300 is not an integer" -- "$IMDB" report --run "$OUT/hugestep" --data "$DATA"
[ ! -e "$OUT/hugestep/report.html" ] && pass "no report drawn from a bad step" || failed "a report was drawn from a bad step"
expect "stop part-way" 0 "stopped after 3 of 26 steps" -- "$IMDB" train "${small[@]}" --epochs 2 --stop-after 3 --out "$OUT/part"
expect "report of a run stopped before its first epoch ended (checkpoint only)" 0 "report.html" -- "$IMDB" report --run "$OUT/part" --data "$DATA"
expect "check a checkpoint" 0 "checkpoint OK: step 3 of 26" -- "$IMDB" check --run "$OUT/part"
# A --resume already at --stop-after trains nothing (it trained one step more).
checkpoint=$(sha256sum < "$OUT/part/checkpoint.safetensors")
expect "resume at --stop-after" 0 "stopped after 3 of 26 steps" -- "$IMDB" train "${small[@]}" --epochs 2 --stop-after 3 --resume --out "$OUT/part"
[ "$checkpoint" = "$(sha256sum < "$OUT/part/checkpoint.safetensors")" ] && pass "... leaves its checkpoint as it was" || failed "a resume at --stop-after trained"
# A refused --resume (one setting mistyped) changes no file of the run (vocab.txt was overwritten first).
before=$(cd "$OUT/part" && sha256sum checkpoint.safetensors metrics.jsonl vocab.txt)
expect "resume with other settings" 1 "written with other settings: epochs is 2 there but 3 here" -- "$IMDB" train "${small[@]}" --epochs 3 --resume --out "$OUT/part"
expect "resume with another vocabulary size" 1 "written with other settings: vocab_size" -- "$IMDB" train "${small[@]}" --epochs 2 --vocab 50 --resume --out "$OUT/part"
[ "$before" = "$(cd "$OUT/part" && sha256sum checkpoint.safetensors metrics.jsonl vocab.txt)" ] && pass "a refused resume changes nothing" || failed "a refused resume changed the run's files"
expect "resume" 0 "trained 26 steps" -- "$IMDB" train "${small[@]}" --epochs 2 --resume --out "$OUT/part"
# Killed after the last checkpoint, before the model and report: resume finishes the run properly.
accuracy=$(grep -o 'final test accuracy [0-9.]*%' <<<"$("$IMDB" train "${small[@]}" --epochs 2 --resume --out "$OUT/part" 2>&1)")
rm -f "$OUT/part/model.safetensors" "$OUT/part/report.html"
expect "resume of a finished run whose model was lost" 0 "$accuracy" -- "$IMDB" train "${small[@]}" --epochs 2 --resume --out "$OUT/part"
[ -n "$accuracy" ] && [ "$accuracy" != "final test accuracy 0.00%" ] && [ -f "$OUT/part/model.safetensors" ] && [ -f "$OUT/part/report.html" ] \
  && pass "the model and report are back ($accuracy)" || failed "after resuming a finished run: '$accuracy', model or report missing"
expect "predict after that resume" 0 "probability positive" -- "$IMDB" predict --run "$OUT/part" --text "a fine film"
# A model file with one class (predict read past its buffer).
python3 - "$OUT/run/model.safetensors" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
h["__metadata__"]["classes"] = "1"
t = json.dumps(h).encode(); t += b" " * ((8 - len(t) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(t)) + t + raw[8 + n:])
EOF
expect "a model file with one class" 1 "'classes' = '1' is not an integer in [2, 2]" -- "$IMDB" predict --run "$OUT/run" --text hi
# --epochs whose step count cannot be counted: refused at once (it trained forever).
expect "huge --epochs" 2 "--epochs: expects an integer in [1, 1000000]" -- timeout 20 "$IMDB" train "${small[@]}" --epochs 9223372036854775807 --out "$OUT/e"
expect "huge --batch-size" 2 "--batch-size: expects an integer in [1, 1048576]" -- timeout 20 "$IMDB" train "${small[@]}" --batch-size 9223372036854775800 --out "$OUT/b"
expect "a batch larger than the data" 0 "trained 2 steps" -- "$IMDB" train "${small[@]}" --batch-size 1048576 --epochs 2 --out "$OUT/bigbatch"
# A diverging run stops with an error naming the step (it ended "final test accuracy 50.00%").
expect "a diverging run" 1 "training diverged: the loss at step" -- "$IMDB" train "${small[@]}" --epochs 3 --lr 10 --weight-decay 10 --clip 0 --out "$OUT/diverge"
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$OUT/diverge/metrics.jsonl" && pass "metrics.jsonl of the diverged run is JSON" || failed "metrics.jsonl holds lines that are not JSON"
# Two trainers on one folder: the second is refused at once.
# 5,000 epochs (65,000 tiny steps): long enough that no signal below arrives after the run has ended (50 epochs
# ended within the 0.3 s before SIGINT on a fast, idle machine).
"$IMDB" train "${small[@]}" --epochs 5000 --out "$OUT/locked" >/dev/null 2>&1 &
first=$!
for _ in $(seq 1 300); do [ -f "$OUT/locked/metrics.jsonl" ] && break; sleep 0.05; done
expect "a second trainer on the same --out" 1 "another trainer is using the output folder '$OUT/locked'" -- "$IMDB" train "${small[@]}" --epochs 5000 --out "$OUT/locked"
# SIGTERM and SIGINT: stop at a step boundary with a checkpoint, no temporary files left.
for signal in TERM INT; do
  sleep 0.3
  kill -$signal $first
  wait $first; code=$?
  want=$([ $signal = TERM ] && echo 143 || echo 130)
  step=$("$IMDB" check --run "$OUT/locked" 2>&1 | sed -n 's/^checkpoint OK: step \([0-9]*\) .*/\1/p')
  last=$(tail -n 1 "$OUT/locked/metrics.jsonl" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')
  if [ "$code" = "$want" ] && [ -n "$step" ] && [ "$step" = "$last" ] && ! ls "$OUT/locked" | grep -q '\.tmp\.'; then
    pass "SIG$signal: exit $code, checkpoint at step $step = the last logged step, no .tmp files"
  else
    failed "SIG$signal: exit $code (wanted $want), checkpoint step '$step', last logged step '$last', files: $(ls "$OUT/locked" | tr '\n' ' ')"
  fi
  "$IMDB" train "${small[@]}" --epochs 5000 --resume --out "$OUT/locked" >/dev/null 2>&1 &
  first=$!
  for _ in $(seq 1 600); do  # until the resumed trainer has logged a step of its own
    now=$(tail -n 1 "$OUT/locked/metrics.jsonl" 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])' 2>/dev/null)
    [ -n "$now" ] && [ "$now" -gt "$last" ] && break
    sleep 0.05
  done
done
kill -KILL $first 2>/dev/null; wait $first 2>/dev/null
# compare --stop-after leaves no result.json for the unfinished run: a later compare continues it.
cmp=(--data "$DATA" --dim 16 --layers 1 --ffn 32 --max-len 64 --batch-size 16 --quiet --epochs 1 --heads-list 2 --seeds 1 --out "$OUT/cmp")
expect "compare stopped part-way" 0 "stopped at step 3 of 13" -- "$IMDB" compare "${cmp[@]}" --stop-after 3
[ ! -e "$OUT/cmp/heads2-seed0/result.json" ] && pass "no result.json for the unfinished run" || failed "result.json written for an unfinished run"
expect "compare continued" 0 "| 2 | 8 |" -- "$IMDB" compare "${cmp[@]}" --resume
echo '{"test_accuracy": [0.5], "seconds_per_epoch": "x"' > "$OUT/cmp/heads2-seed0/result.json"
expect "a damaged result.json is named" 1 "compare: $OUT/cmp/heads2-seed0/result.json is not a JSON object" -- "$IMDB" compare "${cmp[@]}"
echo '{"test_accuracy": [0.5], "seconds_per_epoch": "x"}' > "$OUT/cmp/heads2-seed0/result.json"
expect "a result.json with a wrong field is named" 1 "heads2-seed0/result.json: \"seconds_per_epoch\" is missing or of the wrong type" -- "$IMDB" compare "${cmp[@]}"
# Flags: every number checked in full, with the flag's name.
expect "help" 0 "Usage:" -- "$IMDB" --help
expect "train help lists the flags with their ranges" 0 "--threads INT:[0, 4096]" -- "$IMDB" train --help
expect "unknown command" 2 "unknown command 'fly'" -- "$IMDB" fly
expect "unknown flag" 2 "--hedas" -- "$IMDB" train --hedas 4
# A long option with one dash was read as the switches -h -e -a ...: help, exit 0, nothing trained.
expect "a long option with one dash" 2 "'-heads' is not an option of imdb train: long options take two dashes (did you mean --heads?)" -- "$IMDB" train -heads 4 --out "$OUT/onedash"
expect "a long option with one dash before the command" 2 "'-help' is not an option: long options take two dashes" -- "$IMDB" -help
[ ! -e "$OUT/onedash" ] && pass "nothing trained after a one-dash option" || failed "a one-dash option trained"
expect "a one-dash value of --out is the value" 2 "--heads-list: an empty item in '2,'" -- "$IMDB" compare --out -runs --heads-list 2,
# Lists: an empty item is a usage error, as every other malformed list is (2, was read as 2).
expect "a list with a trailing comma" 2 "--heads-list: an empty item in '2,'" -- "$IMDB" compare "${cmp[@]}" --heads-list 2,
expect "a list with an empty item inside" 2 "--heads-list: an empty item in '2,,4'" -- "$IMDB" compare "${cmp[@]}" --heads-list=2,,4
expect "--by-length with a leading comma" 2 "--by-length: an empty item in ',64'" -- "$IMDB" eval --run "$OUT/run" --by-length ,64
expect "bad number" 2 "--lr: expects a number in [0, 10], got 'fast'" -- "$IMDB" train --lr fast
expect "--threads past 32 bits" 2 "--threads: expects an integer in [0, 4096], got '4294967297'" -- "$IMDB" train --threads 4294967297
expect "--threads 2^31" 2 "--threads: expects an integer in [0, 4096], got '2147483648'" -- "$IMDB" train --threads 2147483648
# Presets (examples/imdb/presets.h): the preset's fields set, the explicit flags (before or after it) winning,
# an unknown name a usage error naming the presets.
expect "an unknown preset" 2 "--preset 'gpu-huge' is not a preset (known: head+tail-512, head+tail-512-bigrams, bigram-bag, gpu-large)" -- "$IMDB" train --preset gpu-huge
expect "--preset without a name" 2 "--preset needs a name (one of: head+tail-512, head+tail-512-bigrams, bigram-bag, gpu-large)" -- "$IMDB" train --preset
expect "--preset on eval" 2 "--preset" -- "$IMDB" eval --preset gpu-large --run "$OUT/run"
expect "train help lists the presets" 0 "gpu-large: a model a GPU fills" -- "$IMDB" train --help
expect "train with the large preset, sizes overridden" 0 "stopped after 1 of" -- "$IMDB" train --data "$DATA" --layers 1 \
  --preset gpu-large --batch-size 4 --max-len 16 --vocab 500 --stop-after 1 --threads 2 --quiet --out "$OUT/preset"
python3 - "$OUT/preset/checkpoint.safetensors" <<'EOF' && pass "the preset's settings, with the explicit flags' values, are the run's" || failed "the large preset's run has the wrong settings"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
meta = json.loads(data[8 : 8 + struct.unpack("<Q", data[:8])[0]])["__metadata__"]
want = {"dim": "512", "heads": "8", "ffn_dim": "2048", "truncate": "head+tail", "precision": "bf16", "lr": "0.0003",
        "warmup": "0.1", "layers": "1", "batch_size": "4", "max_len": "16", "attention": "full"}
got = {k: meta.get(k) for k in want}
assert got == want, got
EOF
expect "imdb flops for the large preset" 0 "132.12 MFLOP per token, 4.329 TFLOP per step of 64 x 512" -- "$IMDB" flops --preset gpu-large
expect "imdb flops: a flag overrides the preset" 0 "2.165 TFLOP per step of 32 x 512" -- "$IMDB" flops --preset gpu-large --batch-size 32
expect "imdb flops: the MFU of a throughput" 0 "MFU 33.5% of 789.5 TFLOP/s" -- "$IMDB" flops --preset gpu-large --tokens-per-s 2000000 --peak-tflops 789.5
# imdb batches: a run's first batches as its training takes them (bench/train_step.sh gives them to both frameworks).
expect "imdb batches writes a run's first batches" 0 "2 batches of up to 16 reviews written to" -- "$IMDB" batches "${small[@]}" --count 2 --file "$OUT/batches.safetensors"
python3 - "$OUT/batches.safetensors" <<'EOF' && pass "imdb batches: each batch's tokens, padding mask and labels" || failed "imdb batches wrote the wrong arrays"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8 : 8 + n]), data[8 + n :]
assert sorted(k for k in header if k != "__metadata__") == [f"{b}.{a}" for b in (0, 1) for a in ("labels", "mask", "tokens")], header
for b in (0, 1):
    tokens, mask, labels = (header[f"{b}.{a}"] for a in ("tokens", "mask", "labels"))
    assert (tokens["dtype"], mask["dtype"], labels["dtype"]) == ("I64", "BOOL", "I64"), header
    B, T = tokens["shape"]
    assert B == 16 and mask["shape"] == [B, T] and labels["shape"] == [B] and 1 <= T <= 64, header
    ids = struct.unpack(f"<{B * T}q", body[tokens["data_offsets"][0] : tokens["data_offsets"][1]])
    pad = body[mask["data_offsets"][0] : mask["data_offsets"][1]]
    assert all((ids[i] == 0) == (pad[i] == 1) for i in range(B * T)), "the mask is not where the [PAD] tokens are"
    assert any(pad[i] == 0 for i in range(B * T) if i % T == T - 1), "no review is the batch's longest"
    assert set(struct.unpack(f"<{B}q", body[labels["data_offsets"][0] : labels["data_offsets"][1]])) <= {0, 1}
EOF
expect "imdb batches needs --file" 2 "--file is required" -- "$IMDB" batches --data "$DATA"
cp "$OUT/run/model.safetensors" "$OUT/kept.safetensors"
expect "imdb batches does not write over a file (a saved model)" 2 "exists: imdb batches writes a new file" -- "$IMDB" batches "${small[@]}" --count 1 --file "$OUT/kept.safetensors"
cmp -s "$OUT/run/model.safetensors" "$OUT/kept.safetensors" && pass "the file is untouched" || failed "imdb batches changed an existing file"
# Whole reviews (issue 15): --attention, --truncate, --checkpoint.
expect "bad --attention" 2 "--attention: expects full or window:W[,global:G]" -- "$IMDB" train --attention window:-3
expect "--attention with junk" 2 "got 'window:8,global'" -- "$IMDB" train --attention window:8,global
expect "bad --truncate" 2 "--truncate: middle not in {head,tail,head+tail}" -- "$IMDB" train --truncate middle
expect "a window wider than --max-len" 2 "--attention window:100: the window and the global tokens must fit in --max-len 64" -- "$IMDB" train "${small[@]}" --attention window:100 --out "$OUT/wide"
expect "train with window attention, head+tail and checkpointing" 0 "final test accuracy" -- "$IMDB" train "${small[@]}" --epochs 1 --attention window:8,global:1 --truncate head+tail --checkpoint --out "$OUT/window"
expect "resume with another attention" 1 "written with other settings: attention is window:8,global:1 there but full here" -- "$IMDB" train "${small[@]}" --epochs 1 --truncate head+tail --checkpoint --resume --out "$OUT/window"
expect "an octal-looking number" 2 "--epochs: expects an integer in [1, 1000000], got '0x10'" -- "$IMDB" train --epochs 0x10
expect "a flag as a value" 2 "--out needs a value, got the flag '--resume'" -- "$IMDB" train --out --resume
expect "heads not dividing dim" 2 "--dim 128 is not divisible by --heads 3" -- "$IMDB" train --heads 3
expect "bad device" 2 "unknown device 'tpu'" -- "$IMDB" train --device tpu
expect "bad --cuda-graph" 2 "--cuda-graph: maybe not in {on,off}" -- "$IMDB" train --cuda-graph maybe
expect "--cuda-graph on without a GPU" 1 "--cuda-graph on: CUDA graphs need a GPU (--device cuda), not --device cpu" -- "$IMDB" train "${small[@]}" --cuda-graph on --out "$OUT/graph-cpu"
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
expect "check a missing checkpoint" 1 "checkpoint.safetensors" -- "$IMDB" check --run "$OUT/none"
expect "missing run" 1 "$OUT/none holds no trained model: no model.safetensors (imdb train) or nbsvm.safetensors (imdb nbsvm) (there is no such folder)" -- "$IMDB" predict --run "$OUT/none" --text hi
head -c 100 "$OUT/part/model.safetensors" > "$OUT/part/cut.safetensors" && mv "$OUT/part/cut.safetensors" "$OUT/part/model.safetensors"
expect "corrupt model file" 1 "model.safetensors" -- "$IMDB" predict --run "$OUT/part" --text hi
expect "predict needs a review" 2 "exactly one of --text or --file" -- "$IMDB" predict --run "$OUT/part"
# Out of memory under an address-space limit, at limits where different allocations fail (a tensor,
# a C++ container, a block being freed): always the documented error, never "std::bad_alloc" or an
# abort from a destructor.
# AddressSanitizer: GCC links its runtime as libasan.so, clang into the program (then only its symbols show).
# Masked-token pretraining, then a classifier started from it (--init); bad --init refused, nothing overwritten.
expect "pretrain" 0 "encoder in $OUT/pre/encoder.safetensors" -- "$IMDB" pretrain "${small[@]}" --max-len 32 --steps 6 --out "$OUT/pre"
grep -q 'id="pretrain-accuracy"' "$OUT/pre/report.html" && pass "pretrain's report.html has its accuracy chart" || failed "pretrain's report.html has no accuracy chart"
expect "pretrain stopped part-way" 0 "stopped after 3 of 6 steps" -- "$IMDB" pretrain "${small[@]}" --max-len 32 --steps 6 --stop-after 3 --out "$OUT/pre-part"
checkpoint=$(sha256sum < "$OUT/pre-part/checkpoint.safetensors")
expect "pretrain resumed at --stop-after" 0 "stopped after 3 of 6 steps" -- "$IMDB" pretrain "${small[@]}" --max-len 32 --steps 6 --stop-after 3 --resume --out "$OUT/pre-part"
[ "$checkpoint" = "$(sha256sum < "$OUT/pre-part/checkpoint.safetensors")" ] && pass "... trains nothing" || failed "a pretraining resumed at --stop-after trained"
expect "pretrain resumed" 0 "pretrained 6 steps" -- "$IMDB" pretrain "${small[@]}" --max-len 32 --steps 6 --resume --out "$OUT/pre-part"
cmp -s "$OUT/pre/encoder.safetensors" "$OUT/pre-part/encoder.safetensors" && pass "a resumed pretraining writes the uninterrupted run's encoder" || failed "a resumed pretraining's encoder differs"
expect "train --init" 0 "final test accuracy" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre" --out "$OUT/fine"
before=$(cd "$OUT/fine" && sha256sum checkpoint.safetensors metrics.jsonl vocab.txt model.safetensors)
expect "--init of another model size" 1 "it was pretrained with --dim 16, this run has --dim 32" -- "$IMDB" train "${small[@]}" --dim 32 --max-len 32 --epochs 1 --init "$OUT/pre" --out "$OUT/fine"
expect "--init of another vocabulary" 1 "it was pretrained with --vocab 20000, this run has --vocab 50" -- "$IMDB" train "${small[@]}" --vocab 50 --max-len 32 --epochs 1 --init "$OUT/pre" --out "$OUT/fine"
expect "--init of a classifier's run" 1 "that is a classifier's run (model.safetensors), not a pretrained encoder" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/run" --out "$OUT/fine"
expect "--resume with another --encoder-lr-scale" 1 "encoder_lr_scale" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre" --encoder-lr-scale 0.5 --resume --out "$OUT/fine"
expect "--encoder-lr-scale out of range" 2 "--encoder-lr-scale" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre" --encoder-lr-scale 2 --out "$OUT/fine"
expect "check of a pretraining's folder" 0 "encoder OK: the model of step 6 of 6" -- "$IMDB" check --run "$OUT/pre"
expect "pretrain --bigrams" 2 "--bigrams is for train" -- "$IMDB" pretrain "${small[@]}" --max-len 32 --steps 6 --bigrams 1000 --out "$OUT/pre"
expect "train --init --bigrams" 0 "final test accuracy" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre" --bigrams 1000 --encoder-lr-scale 0.5 --out "$OUT/fine-bigrams"
expect "eval an ensemble" 0 "(ensemble of 2 runs: the mean probability)" -- "$IMDB" eval --run "$OUT/fine" --run "$OUT/fine-bigrams" --data "$DATA"
expect "predict with an ensemble" 0 "probability positive" -- "$IMDB" predict --run "$OUT/fine" --run "$OUT/fine-bigrams" --text "a fine film"
expect "eval an ensemble by length" 2 "--by-length takes one Transformer --run" -- "$IMDB" eval --run "$OUT/fine" --run "$OUT/fine-bigrams" --data "$DATA" --by-length 64
expect "eval --split validation of runs that held none out" 1 "held out no validation reviews" -- "$IMDB" eval --run "$OUT/fine" --split validation --data "$DATA"
# The accuracy preset's pipeline (scripts/imdb_ensemble.sh) on the small data: pretraining, the two members, their ensemble
# (--validation=20 in the --flag=value form: the ensemble must still be evaluated on the held-out reviews).
expect "the ensemble script" 0 "validation accuracy" -- env EMBER_IMDB="$IMDB" EMBER_PRETRAIN_STEPS=8 bash "$(dirname "$0")/../scripts/imdb_ensemble.sh" "$OUT/ensemble" --pretrain --encoder "--ffn 24 --heads 4" "${small[@]}" --max-len 32 --attention window:8,global:1 --dim 16 --validation=20 --threads=1 --quiet
[ -f "$OUT/ensemble/pretrain/encoder.safetensors" ] && [ -f "$OUT/ensemble/transformer/model.safetensors" ] && [ -f "$OUT/ensemble/nbsvm/nbsvm.safetensors" ] && grep -q "ensemble of 2 runs" "$OUT/ensemble/ensemble.txt" && pass "the ensemble script wrote its three runs and the ensemble's accuracy" || failed "the ensemble script's files are missing"
# --encoder's flags shape the pretraining and the Transformer (over the other flags' --ffn 32); NBSVM held out the same
# reviews (--validation=20) and took none of the Transformer's flags (it would refuse them).
# A setting recorded in a safetensors file's metadata: its header is 8 bytes of length, then JSON.
setting_of() {
  python3 -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"].get(sys.argv[2], "(none)"))' "$1" "$2"
}
[ "$(setting_of "$OUT/ensemble/transformer/model.safetensors" ffn_dim)" = 24 ] && pass "--encoder reached the Transformer" || failed "--encoder: Transformer ffn_dim $(setting_of "$OUT/ensemble/transformer/model.safetensors" ffn_dim)"
[ "$(setting_of "$OUT/ensemble/nbsvm/nbsvm.safetensors" validation)" = 20 ] && pass "the ensemble script's NBSVM held out the same reviews" || failed "the ensemble script's NBSVM held out $(setting_of "$OUT/ensemble/nbsvm/nbsvm.safetensors" validation), not --validation=20"
[ "$(setting_of "$OUT/ensemble/transformer/model.safetensors" lr)" = 0.001 ] && pass "the ensemble script fine-tunes the pretrained Transformer at --lr 1e-3" || failed "the ensemble script's fine-tune: lr $(setting_of "$OUT/ensemble/transformer/model.safetensors" lr)"
# Run again into the same folder: refused at its NBSVM (never written over unless asked), then with --overwrite
# passed on to each of its commands, the same three runs again, byte for byte.
ensemble_files=$(cd "$OUT/ensemble" && sha256sum pretrain/encoder.safetensors transformer/model.safetensors nbsvm/nbsvm.safetensors)
expect "the ensemble script again into its folder" 1 "$OUT/ensemble/nbsvm/nbsvm.safetensors exists: a trained NBSVM is never overwritten unless asked" -- env EMBER_IMDB="$IMDB" EMBER_PRETRAIN_STEPS=8 bash "$(dirname "$0")/../scripts/imdb_ensemble.sh" "$OUT/ensemble" --pretrain --encoder "--ffn 24 --heads 4" "${small[@]}" --max-len 32 --attention window:8,global:1 --dim 16 --validation=20 --threads=1 --quiet
expect "... and with --overwrite" 0 "validation accuracy" -- env EMBER_IMDB="$IMDB" EMBER_PRETRAIN_STEPS=8 bash "$(dirname "$0")/../scripts/imdb_ensemble.sh" "$OUT/ensemble" --pretrain --encoder "--ffn 24 --heads 4" "${small[@]}" --max-len 32 --attention window:8,global:1 --dim 16 --validation=20 --threads=1 --quiet --overwrite
[ "$ensemble_files" = "$(cd "$OUT/ensemble" && sha256sum pretrain/encoder.safetensors transformer/model.safetensors nbsvm/nbsvm.safetensors)" ] && pass "... the same runs again" || failed "the ensemble script with --overwrite wrote other runs"
expect "the ensemble script's --encoder without its flags" 2 "--encoder needs its flags" -- bash "$(dirname "$0")/../scripts/imdb_ensemble.sh" "$OUT/ensemble-bad" --encoder
# NBSVM (imdb nbsvm): trained, evaluated alone and beside a Transformer, never overwritten; a Transformer's flag refused.
nb=(--data "$DATA" --buckets 65536 --epochs 2 --lr 0.05 --batch-size 16 --quiet)
expect "nbsvm" 0 "test accuracy" -- "$IMDB" nbsvm "${nb[@]}" --out "$OUT/nb"
expect "eval an NBSVM" 0 "test accuracy" -- "$IMDB" eval --run "$OUT/nb" --data "$DATA"
expect "eval a Transformer and an NBSVM" 0 "(ensemble of 2 runs: the mean probability)" -- "$IMDB" eval --run "$OUT/fine" --run "$OUT/nb" --data "$DATA"
expect "predict with a Transformer and an NBSVM" 0 "probability positive" -- "$IMDB" predict --run "$OUT/fine" --run "$OUT/nb" --text "a fine film"
expect "eval an NBSVM by length" 2 "--by-length takes one Transformer --run" -- "$IMDB" eval --run "$OUT/nb" --data "$DATA" --by-length 64
nb_before=$(sha256sum "$OUT/nb/nbsvm.safetensors" "$OUT/nb/vocab.txt")
expect "nbsvm into a folder that has one" 1 "is never overwritten" -- "$IMDB" nbsvm "${nb[@]}" --out "$OUT/nb"
[ "$nb_before" = "$(sha256sum "$OUT/nb/nbsvm.safetensors" "$OUT/nb/vocab.txt")" ] && pass "a refused nbsvm changes nothing" || failed "a refused nbsvm changed the saved NBSVM"
expect "nbsvm into a Transformer's folder" 1 "holds a classifier's run (its model.safetensors)" -- "$IMDB" nbsvm "${nb[@]}" --out "$OUT/run"
expect "nbsvm into a pretraining's folder" 1 "holds a pretraining (its encoder.safetensors)" -- "$IMDB" nbsvm "${nb[@]}" --out "$OUT/pre"
expect "train into an NBSVM's folder" 1 "train: $OUT/nb holds an NBSVM" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/nb"
expect "pretrain into an NBSVM's folder" 1 "pretrain: $OUT/nb holds an NBSVM" -- "$IMDB" pretrain "${small[@]}" --steps 2 --out "$OUT/nb"
expect "report of an NBSVM" 1 "report: $OUT/nb is an NBSVM (nbsvm.safetensors): imdb nbsvm writes no report" -- "$IMDB" report --run "$OUT/nb" --data "$DATA"
expect "check of an NBSVM" 0 "NBSVM OK: 1-3-grams in 65536 buckets" -- "$IMDB" check --run "$OUT/nb"
expect "nbsvm with a Transformer's flag" 2 "--heads" -- "$IMDB" nbsvm "${nb[@]}" --heads 4 --out "$OUT/nb-heads"
expect "nbsvm --ngrams 0" 2 "--ngrams" -- "$IMDB" nbsvm "${nb[@]}" --ngrams 0 --out "$OUT/nb-0"
expect "nbsvm --l2 -1" 2 "--l2" -- "$IMDB" nbsvm "${nb[@]}" --l2 -1 --out "$OUT/nb-l2"
expect "pretrain --encoder-lr-scale" 2 "--encoder-lr-scale is for train" -- "$IMDB" pretrain "${small[@]}" --max-len 32 --steps 6 --encoder-lr-scale 0.5 --out "$OUT/pre"
cp -r "$OUT/pre" "$OUT/pre-bad" && head -c 3000 "$OUT/pre/encoder.safetensors" > "$OUT/pre-bad/encoder.safetensors"
expect "--init of a half-written encoder" 1 "encoder.safetensors" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre-bad" --out "$OUT/fine"
[ "$before" = "$(cd "$OUT/fine" && sha256sum checkpoint.safetensors metrics.jsonl vocab.txt model.safetensors)" ] && pass "a refused --init changes nothing" || failed "a refused --init changed the run's files"
expect "pretrain --resume of a half-written checkpoint" 1 "checkpoint.safetensors" -- bash -c "head -c 4000 '$OUT/pre/checkpoint.safetensors' > '$OUT/pre-bad/checkpoint.safetensors' && exec \"\$0\" pretrain $(printf '%q ' "${small[@]}") --max-len 32 --steps 6 --resume --out '$OUT/pre-bad'" "$IMDB"
# Kills while a pretraining saves (EMBER_FAULT_PAUSE_MID_WRITE stops a write halfway; the kill lands there). The
# encoder is written before its checkpoint, so no kill leaves a later checkpoint beside an earlier encoder; --init
# takes an encoder only as the model of the checkpoint beside it, and a --resume writes the right one.
kill_mid_write() {  # FOLDER FILE command...: killed (SIGKILL) once FOLDER/FILE.tmp.* has bytes; fails if it never did
  local folder=$1 file=$2 partial="" pid
  shift 2
  EMBER_FAULT_PAUSE_MID_WRITE=$file:5000 "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 1500); do
    partial=$(find "$folder" -maxdepth 1 -name "$file.tmp.*" -size +0 2>/dev/null | head -n 1)
    [ -n "$partial" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$folder"/*.tmp.*
  [ -n "$partial" ]
}
pre=("${small[@]}" --max-len 32 --steps 6)
files_of() { (cd "$1" && sha256sum $(ls -A | grep -v '^\.lock$') 2>/dev/null); }
# The run's only encoder write (its last step), killed: nothing saved, nothing claimed.
kill_mid_write "$OUT/k1" encoder.safetensors "$IMDB" pretrain "${pre[@]}" --out "$OUT/k1" && pass "killed mid-write of a pretraining's only encoder" || failed "the encoder write did not begin"
expect "--init of a pretraining killed before its first encoder" 1 "--init $OUT/k1: there is no encoder.safetensors there" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/k1" --out "$OUT/k1-fine"
expect "pretrain --resume with no checkpoint to continue" 1 "pretrain --resume: there is no $OUT/k1/checkpoint.safetensors to continue from" -- "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k1"
expect "check of a folder a pretraining was killed in before its first checkpoint" 1 "check: $OUT/k1 holds no run" -- "$IMDB" check --run "$OUT/k1"
expect "the pretraining run again" 0 "pretrained 6 steps" -- "$IMDB" pretrain "${pre[@]}" --out "$OUT/k1"
cmp -s "$OUT/pre/encoder.safetensors" "$OUT/k1/encoder.safetensors" && pass "... writes the uninterrupted run's encoder" || failed "the pretraining run again wrote another encoder"
# Stopped at step 3, then its --resume killed mid-write of the final encoder: the step-3 files stand, consistent.
"$IMDB" pretrain "${pre[@]}" --stop-after 3 --out "$OUT/k2" >/dev/null 2>&1
kill_mid_write "$OUT/k2" encoder.safetensors "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k2" && pass "killed mid-write of a pretraining's final encoder" || failed "the final encoder write did not begin"
expect "check after the kill: the step-3 checkpoint and its encoder" 0 "encoder OK: the model of step 3 of 6" -- "$IMDB" check --run "$OUT/k2"
expect "--resume after the kill writes the final encoder" 0 "pretrained 6 steps" -- "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k2"
cmp -s "$OUT/pre/encoder.safetensors" "$OUT/k2/encoder.safetensors" && pass "... the uninterrupted run's" || failed "the resumed pretraining's final encoder differs"
# Killed mid-write of the final checkpoint: the final encoder beside the step-3 checkpoint: --init refuses it by step.
"$IMDB" pretrain "${pre[@]}" --stop-after 3 --out "$OUT/k3" >/dev/null 2>&1
kill_mid_write "$OUT/k3" checkpoint.safetensors "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k3" && pass "killed mid-write of a pretraining's final checkpoint" || failed "the final checkpoint write did not begin"
expect "--init of an encoder that is not its checkpoint's model" 1 "encoder.safetensors is not the model of the checkpoint beside it (step 3 of 6)" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/k3" --out "$OUT/k3-fine"
expect "--resume after that kill" 0 "pretrained 6 steps" -- "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k3"
cmp -s "$OUT/pre/encoder.safetensors" "$OUT/k3/encoder.safetensors" && pass "... writes the uninterrupted run's encoder" || failed "the encoder after the resume differs"
# Killed mid-write of the final report.html: the run's files are final; the --resume trains nothing, writes the report.
kill_mid_write "$OUT/k3" report.html "$IMDB" pretrain "${pre[@]}" --overwrite --out "$OUT/k3" && pass "killed mid-write of a pretraining's report" || failed "the report write did not begin"
expect "--resume of a finished pretraining whose report was lost" 0 "the pretraining had finished (step 6 of 6): its encoder written again from its checkpoint" -- "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k3"
grep -q 'id="pretrain-accuracy"' "$OUT/k3/report.html" && ! grep -q nan <<<"$out" && pass "... and its report, with no NaN printed" || failed "no report after the resume, or a NaN printed: $out"
# A folder from a build that wrote the checkpoint first, killed between the two: the final checkpoint beside step 3's
# encoder, whose checksum holds. --init refuses it before writing anything; the --resume writes the final one.
"$IMDB" pretrain "${pre[@]}" --stop-after 3 --out "$OUT/k4" >/dev/null 2>&1 && cp "$OUT/k4/encoder.safetensors" "$OUT/encoder-step3"
"$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k4" >/dev/null 2>&1 && cp "$OUT/encoder-step3" "$OUT/k4/encoder.safetensors"
before=$(files_of "$OUT/fine")
expect "--init of an earlier step's encoder beside the final checkpoint" 1 "--init $OUT/k4: encoder.safetensors is not the model of the checkpoint beside it (step 6 of 6)" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/k4" --out "$OUT/fine"
[ "$before" = "$(files_of "$OUT/fine")" ] && pass "... refused before --out was touched" || failed "the refused --init changed files of --out"
expect "check names it too" 1 "check $OUT/k4: encoder.safetensors is not the model of the checkpoint beside it" -- "$IMDB" check --run "$OUT/k4"
expect "pretrain --resume of the finished run writes its encoder again" 0 "the pretraining had finished (step 6 of 6): its encoder written again from its checkpoint, in $OUT/k4/encoder.safetensors" -- "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/k4"
cmp -s "$OUT/pre/encoder.safetensors" "$OUT/k4/encoder.safetensors" && pass "... the uninterrupted run's" || failed "the rewritten encoder differs"
# One kind of run per folder: another kind is refused (nothing written) unless --overwrite, which replaces it.
before=$(files_of "$OUT/pre")
expect "train --init into the pretraining's own folder" 1 "train: --out $OUT/pre is the --init folder" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre" --out "$OUT/pre"
expect "... with --overwrite too" 1 "is the --init folder" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/pre" --out "$OUT/pre" --overwrite
expect "train into a pretraining's folder" 1 "train: $OUT/pre holds a pretraining (its encoder.safetensors): give this classifier's run a folder of its own (another --out), or add --overwrite" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/pre"
ln -s "$OUT/pre" "$OUT/pre-link"
expect "train into a link to a pretraining's folder" 1 "holds a pretraining" -- "$IMDB" train "${small[@]}" --epochs 1 --out "$OUT/pre-link"
[ "$before" = "$(files_of "$OUT/pre")" ] && pass "the refused runs changed nothing of the pretraining" || failed "a refused run changed the pretraining's files"
before=$(files_of "$OUT/run")
expect "pretrain into a classifier's folder" 1 "pretrain: $OUT/run holds a classifier's run (its model.safetensors): give this pretraining a folder of its own" -- "$IMDB" pretrain "${pre[@]}" --out "$OUT/run"
expect "pretrain --resume in a classifier's folder" 1 "pretrain --resume: $OUT/run holds a classifier's run (its model.safetensors), not a pretraining to continue" -- "$IMDB" pretrain "${pre[@]}" --resume --out "$OUT/run"
[ "$before" = "$(files_of "$OUT/run")" ] && pass "the refused pretrainings changed nothing of the classifier's run" || failed "a refused pretraining changed the classifier's files"
expect "--resume with --overwrite" 2 "--resume continues the run in --out and --overwrite replaces it" -- "$IMDB" train "${small[@]}" --epochs 1 --resume --overwrite --out "$OUT/run"
for command in train pretrain nbsvm; do
  expect "$command --help lists --overwrite" 0 "--overwrite" -- "$IMDB" $command --help
done
cp -r "$OUT/run" "$OUT/over"
expect "pretrain --overwrite of a classifier's run" 0 "pretrained 6 steps" -- "$IMDB" pretrain "${pre[@]}" --overwrite --out "$OUT/over"
[ ! -e "$OUT/over/model.safetensors" ] && cmp -s "$OUT/pre/encoder.safetensors" "$OUT/over/encoder.safetensors" && pass "... replaced it: no model left, the pretraining's encoder" || failed "--overwrite left the classifier's model, or wrote another encoder"
expect "nbsvm --overwrite of a pretraining" 0 "test accuracy" -- "$IMDB" nbsvm "${nb[@]}" --overwrite --out "$OUT/over"
[ "$(ls "$OUT/over")" = "$(printf 'nbsvm.safetensors\nvocab.txt')" ] && pass "... leaves the NBSVM's files alone" || failed "after nbsvm --overwrite: $(ls "$OUT/over" | tr '\n' ' ')"
kill_mid_write "$OUT/over" nbsvm.safetensors "$IMDB" nbsvm "${nb[@]}" --overwrite --out "$OUT/over" && pass "nbsvm --overwrite killed mid-write of its model" || failed "the NBSVM's write did not begin"
expect "check after that kill: the old NBSVM is gone, not half-replaced" 1 "check: $OUT/over holds no run" -- "$IMDB" check --run "$OUT/over"
expect "nbsvm again in that folder" 0 "test accuracy" -- "$IMDB" nbsvm "${nb[@]}" --out "$OUT/over"
expect "compare into a pretraining's folder" 1 "compare: $OUT/pre holds a pretraining (its encoder.safetensors): give this comparison a folder of its own" -- "$IMDB" compare "${cmp[@]}" --out "$OUT/pre"
# --init of a folder a pretraining is still writing (its encoder and checkpoint change under the reader): refused.
"$IMDB" pretrain "${pre[@]}" --steps 100000 --out "$OUT/running" >/dev/null 2>&1 &
running=$!
for _ in $(seq 1 500); do [ -s "$OUT/running/metrics.jsonl" ] && break; sleep 0.02; done
expect "--init of a pretraining still running" 1 "--init $OUT/running: a trainer is running there (it holds $OUT/running/.lock)" -- "$IMDB" train "${small[@]}" --max-len 32 --epochs 1 --init "$OUT/running" --out "$OUT/running-fine"
kill -KILL $running 2>/dev/null; wait $running 2>/dev/null
# check, report, eval and predict know every kind of folder.
expect "check of the ensemble script's folder: each of its runs" 0 "transformer: checkpoint OK" -- "$IMDB" check --run "$OUT/ensemble"
grep -q "^nbsvm: NBSVM OK" <<<"$out" && grep -q "^pretrain: encoder OK: the model of step 4 of 8" <<<"$out" && pass "... its NBSVM and its pretraining too" || failed "check of the ensemble's folder: $out"
expect "report of a pretraining" 0 "wrote $OUT/pre/report.html" -- "$IMDB" report --run "$OUT/pre" --data "$DATA"
expect "report of the ensemble's folder: its members' pages" 0 "wrote $OUT/ensemble/transformer/report.html" -- "$IMDB" report --run "$OUT/ensemble" --data "$DATA"
expect "eval of a pretraining" 1 "$OUT/pre is a pretraining (encoder.safetensors): it predicts masked words, not sentiment; fine-tune a classifier from it with \`imdb train --init $OUT/pre\`" -- "$IMDB" eval --run "$OUT/pre" --data "$DATA"
expect "predict with an ensemble's folder" 1 "give its members, e.g. --run $OUT/ensemble/transformer --run $OUT/ensemble/nbsvm" -- "$IMDB" predict --run "$OUT/ensemble" --text "a fine film"
expect "--init of an NBSVM" 1 "that is an NBSVM (nbsvm.safetensors), not a pretrained encoder" -- "$IMDB" train "${small[@]}" --epochs 1 --init "$OUT/nb" --out "$OUT/nb-init"
# An empty path (an unset variable) is a usage error: --init "" trained from scratch without a word.
expect "--init with an empty path" 2 "--init needs a path, got an empty one" -- "$IMDB" train "${small[@]}" --epochs 1 --init "" --out "$OUT/empty-init"
expect "--run with an empty path" 2 "--run needs a path, got an empty one" -- "$IMDB" eval --run "" --data "$DATA"
# A folder where a run's file goes is refused before the run trains (it failed at its first save).
mkdir -p "$OUT/dir-encoder/encoder.safetensors"
expect "pretrain where encoder.safetensors is a folder" 1 "$OUT/dir-encoder/encoder.safetensors is a folder: the run could not write its encoder.safetensors there" -- "$IMDB" pretrain "${pre[@]}" --out "$OUT/dir-encoder"
[ ! -e "$OUT/dir-encoder/vocab.txt" ] && pass "... before it wrote anything" || failed "a refused pretraining wrote vocab.txt"
# A pretraining's report reads its metrics.jsonl as a classifier's does, every field checked; without its checkpoint,
# from its encoder's settings.
cp -r "$OUT/pre" "$OUT/pre-report" && echo '{"kind": "step", "step": 1e300, "loss": 1}' >> "$OUT/pre-report/metrics.jsonl"
expect "report of a pretraining whose metrics have a step of 1e300" 1 "pre-report/metrics.jsonl:8: field 'step' = 1e+300 is not an integer" -- "$IMDB" report --run "$OUT/pre-report" --data "$DATA"
cp "$OUT/pre/metrics.jsonl" "$OUT/pre-report/" && rm "$OUT/pre-report/checkpoint.safetensors"
expect "report of a pretraining's encoder kept without its checkpoint" 0 "wrote $OUT/pre-report/report.html" -- "$IMDB" report --run "$OUT/pre-report" --data "$DATA"
if ldd "$IMDB" 2>/dev/null | grep -q libasan || nm "$IMDB" 2>/dev/null | grep -q " __asan_init$"; then
  echo "skipped: out of memory under ulimit -v (AddressSanitizer reserves more address space than any limit allows)"
else
  # The address space the program needs to start (a CUDA build maps large libraries), in KiB; searched up to
  # 64 GiB, so that a program that cannot start under any limit fails this check instead of looping.
  base=8000
  # (Below it the dynamic loader itself may crash; bash's report of that is silenced.)
  { while [ "$base" -le 67108864 ] && ! bash -c "ulimit -v $base; exec \"\$0\" --help" "$IMDB" >/dev/null 2>&1; do
      base=$((base + 8000)); done; } 2>/dev/null
  [ "$base" -le 67108864 ] || failed "out of memory under ulimit -v: $IMDB --help does not start under 64 GiB of address space"
  oom_failed=0 oom_clean=0 oom_bad=""
  for extra in $(seq 20000 6000 140000); do
    limit=$((base + extra))
    out=$(bash -c "ulimit -v $limit; exec \"\$0\" train --data \"\$1\" --dim 256 --heads 2 --layers 1 --ffn 32 --max-len 64 --batch-size 16 --quiet --epochs 1 --threads 2 --out \"\$2\"" "$IMDB" "$DATA" "$OUT/oom" 2>&1)
    code=$?
    [ "$code" -eq 0 ] && continue
    oom_failed=$((oom_failed + 1))
    if [ "$code" -eq 1 ] && grep -q "^error: out of CPU memory" <<<"$out"; then
      oom_clean=$((oom_clean + 1))
    elif [ "$code" -eq 1 ] && grep -q "^error: .*Resource temporarily unavailable" <<<"$out"; then
      :  # too little left to start the thread pool: an error, but not this test's subject
    else
      oom_bad="$oom_bad [ulimit -v $limit: exit $code: $(tail -n 1 <<<"$out")]"
    fi
  done
  [ "$oom_clean" -gt 0 ] && [ -z "$oom_bad" ] && pass "out of memory under ulimit -v: $oom_clean of $oom_failed limits that ran out say 'out of CPU memory' (start needs $base KiB)" \
    || failed "out of memory under ulimit -v ($oom_clean clean of $oom_failed that ran out; start needs $base KiB):$oom_bad"
fi
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
