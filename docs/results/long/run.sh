#!/usr/bin/env bash
# The whole-reviews runs of docs/imdb.md (issue 15), one after another: the preset (every token of
# every review, window attention) for seeds 0, 1, 2.
# Usage: [THREADS=N] [SEEDS="0 1 2"] run.sh IMDB_BINARY REVIEWS_JSON OUT_DIR
set -u
imdb=$1 data=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
commit=$(git -C "$here" rev-parse --short HEAD)
for seed in ${SEEDS:-0 1 2}; do
  {
    echo "# commit $commit, started $(date -u +%FT%TZ), load: $(uptime)"
    "$imdb" train --data "$data" --max-len 2560 --truncate head+tail --attention window:128,global:1 \
      --seed "$seed" --log-every 100 ${THREADS:+--threads "$THREADS"} --out "$out/whole-seed$seed"
    echo "# exit $?, ended $(date -u +%FT%TZ), load: $(uptime)"
  } > "$here/whole-seed$seed.log" 2>&1
  cp "$out/whole-seed$seed/result.json" "$here/whole-seed$seed.result.json" 2>/dev/null
  cp "$out/whole-seed$seed/metrics.jsonl" "$here/whole-seed$seed.metrics.jsonl" 2>/dev/null
done
