#!/usr/bin/env bash
# Session 15: NBSVM variants on validation (seed 0), alone and with the preset's lr-1e-3 Transformer (ftx-lr1e-3).
set -u
cd /work/runs
I=/work/runs/imdb-nb
name=$1; shift
nice -n 5 $I nbsvm --data aclImdb-train --validation 2500 --seed 0 --threads 1 "$@" --out nbx-$name > nbx-$name.log 2>&1
{ echo "nbx-$name: $*"; grep "^epoch\|^trained" nbx-$name.log
  $I eval --run ftx-lr1e-3 --run nbx-$name --split validation --data aclImdb-train --threads 1 2>&1 | tail -1; } >> nbx-results.txt
