#!/usr/bin/env bash
# Whole reviews against the recipe with the epoch chosen on a validation set (issue 15, docs/imdb.md):
# both hold out the same 2,500 training reviews (--validation 2500) and each run names the epoch the
# validation accuracy chooses. KIND=whole: the whole-reviews preset; KIND=recipe: the 256-token recipe.
# Usage: KIND=whole|recipe [THREADS=N] [SEEDS="0 1 2"] run.sh IMDB_BINARY REVIEWS_JSON OUT_DIR
# Seeds run one after another; start one run.sh per seed to run them side by side.
set -u
imdb=$1 data=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
commit=$(git -C "$here" rev-parse --short HEAD)
case "${KIND:-whole}" in
  whole) preset=(--max-len 2560 --truncate head+tail --attention window:128,global:1) ;;
  recipe) preset=() ;;
  *) echo "KIND must be whole or recipe" >&2; exit 2 ;;
esac
for seed in ${SEEDS:-0 1 2}; do
  name="${KIND:-whole}-seed$seed"
  {
    echo "# commit $commit, started $(date -u +%FT%TZ), load: $(uptime)"
    "$imdb" train --data "$data" "${preset[@]}" --validation 2500 --seed "$seed" --log-every 100 \
      ${THREADS:+--threads "$THREADS"} --out "$out/$name"
    echo "# exit $?, ended $(date -u +%FT%TZ), load: $(uptime)"
  } > "$here/$name.log" 2>&1
  cp "$out/$name/metrics.jsonl" "$here/$name.metrics.jsonl" 2>/dev/null
done
