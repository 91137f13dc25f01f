#!/usr/bin/env bash
# Session 14: a second fine-tune (seed 1) from the validation pretraining's 6,000-step encoder, for a two-Transformer ensemble.
set -u
cd /work/runs
IMDB=/work/runs/imdb-1737838
V=/work/runs/aclImdb-train
while ! grep -q "^trained" ht512-bi17-pre6000-e1.log 2>/dev/null; do sleep 10; done
nice -n 5 $IMDB train --preset head+tail-512-bigrams --init pre512-6k --validation 2500 --data $V --seed 1 --threads 1 --log-every 100 --out ht512-bi17-pre6000-e1-s1 > ht512-bi17-pre6000-e1-s1.log 2>&1
echo "worker c done $(date)"
