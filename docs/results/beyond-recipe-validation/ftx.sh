#!/usr/bin/env bash
# Session 14: fine-tune variants of the preset's Transformer on validation (seed 0), from the 3,000-step encoder (pre512-snap).
set -u
cd /work/runs
I=/work/runs/imdb-1737838
name=$1; shift
nice -n 5 $I train --preset head+tail-512-bigrams --init pre512-snap --validation 2500 --data aclImdb-train --seed 0 --threads 1 --log-every 100 "$@" --out ftx-$name > ftx-$name.log 2>&1
{ echo "ftx-$name: $*"; grep "best epoch" ftx-$name.log; grep "^trained" ftx-$name.log
  $I eval --run ftx-$name --run bag-v100k --split validation --data aclImdb-train --threads 1 2>&1 | tail -1; } >> ftx-results.txt
