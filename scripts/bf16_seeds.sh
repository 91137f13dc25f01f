#!/usr/bin/env bash
# The recipe (h = 4, 3 epochs) trained with --precision bf16 for seeds 0, 1, 2, one after another, then
# compared with the float32 runs of runs/compare/heads4-seed<S>/ (`build/imdb compare`'s; test accuracy, mean over seeds).
# Logs, metrics and results go to <results>/seed<S>/ (default runs/bf16-seeds, outside git: summarise the
# numbers, the command and the commit into docs/precision.md); a finished seed is skipped when rerun.
#
# Usage: scripts/bf16_seeds.sh [--data PATH] [--seeds "0 1 2"] [--threads N] [--results DIR]
#   (build/imdb must be built; EMBER_IMDB=path runs another copy of it; --results defaults to runs/bf16-seeds)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
data=()
seeds="0 1 2"
threads=()
results=runs/bf16-seeds
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) data=(--data "$2"); shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --threads) threads=(--threads "$2"); shift 2 ;;
    --results) results="$2"; shift 2 ;;
    *) echo "usage: $0 [--data PATH] [--seeds \"0 1 2\"] [--threads N] [--results DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$results"
for seed in $seeds; do
  out="runs/$(basename "$results")/heads4-seed$seed"
  keep="$results/seed$seed"
  if [[ -f "$keep/result.json" ]]; then
    echo "seed $seed: done already ($keep/result.json)"
    continue
  fi
  mkdir -p "$keep"
  if [[ -f "$out/metrics.jsonl" && $(grep -c '"kind":"epoch"' "$out/metrics.jsonl") -ge 3 ]]; then
    echo "seed $seed: trained already in $out"
  else
    echo "seed $seed: ${EMBER_IMDB:-build/imdb} train --precision bf16 --seed $seed --out $out (load: $(uptime))" | tee "$keep/train.log"
    "${EMBER_IMDB:-build/imdb}" train --precision bf16 --seed "$seed" --heads 4 --out "$out" --log-every 100 \
      "${data[@]}" "${threads[@]}" 2>&1 | tee -a "$keep/train.log"
  fi
  cp "$out/metrics.jsonl" "$keep/"
  # result.json: the epochs' test accuracies from the metrics (the trainer writes no result.json).
  /usr/bin/env python3 - "$keep" <<'PY'
import json, sys
keep = sys.argv[1]
epochs = [json.loads(l) for l in open(f"{keep}/metrics.jsonl") if '"kind":"epoch"' in l.replace(" ", "")]
json.dump({"test_accuracy": [e["test_accuracy"] for e in epochs],
           "seconds_per_epoch": sum(e["train_seconds"] for e in epochs) / len(epochs),
           "real_tokens_per_s": sum(e["real_tokens_per_s"] for e in epochs) / len(epochs)},
          open(f"{keep}/result.json", "w"), indent=2)
PY
done
/usr/bin/env python3 - "$results" $seeds <<'PY'
import json, statistics, sys
results, seeds = sys.argv[1], sys.argv[2:]
rows = []
for s in seeds:
    try:
        bf = json.load(open(f"{results}/seed{s}/result.json"))["test_accuracy"]
    except FileNotFoundError:
        continue
    try:  # the float32 run of the same seed, as `build/imdb compare` leaves it
        fp = json.load(open(f"runs/compare/heads4-seed{s}/result.json"))["test_accuracy"]
    except FileNotFoundError:
        print(f"seed {s}: no float32 run to compare with (runs/compare/heads4-seed{s}/result.json: run build/imdb compare)")
        continue
    rows.append((s, fp, bf))
    print(f"seed {s}: fp32 {' / '.join(f'{100*a:.2f}' for a in fp)}   bf16 {' / '.join(f'{100*a:.2f}' for a in bf)}")
if rows:
    fp_last = statistics.mean(r[1][-1] for r in rows) * 100
    bf_last = statistics.mean(r[2][-1] for r in rows) * 100
    fp_best = statistics.mean(max(r[1]) for r in rows) * 100
    bf_best = statistics.mean(max(r[2]) for r in rows) * 100
    print(f"mean over {len(rows)} seed(s), last epoch: fp32 {fp_last:.2f}%, bf16 {bf_last:.2f}% "
          f"(bf16 - fp32 = {bf_last - fp_last:+.2f} points)")
    print(f"mean over {len(rows)} seed(s), best epoch: fp32 {fp_best:.2f}%, bf16 {bf_best:.2f}% "
          f"(bf16 - fp32 = {bf_best - fp_best:+.2f} points)")
PY
