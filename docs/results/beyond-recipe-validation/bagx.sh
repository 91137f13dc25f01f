#!/usr/bin/env bash
# Session 14: bag variants on validation (seed 0), then each one's ensemble with the preset's Transformer (3,000-step encoder).
set -u
cd /work/runs
I=/work/runs/imdb-1737838
name=$1; shift
nice -n 5 $I train --preset bigram-bag --validation 2500 --data aclImdb-train --seed 0 --threads 1 --log-every 200 "$@" --out bagx-$name > bagx-$name.log 2>&1
{ echo "bagx-$name: $*"; grep "best epoch" bagx-$name.log; grep "^trained" bagx-$name.log
  $I eval --run ht512-bi17-pre3000-e1 --run bagx-$name --split validation --data aclImdb-train --threads 1 2>&1 | tail -1; } >> bagx-results.txt
