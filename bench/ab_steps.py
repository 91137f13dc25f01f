#!/usr/bin/env python3
"""Two builds of Ember's training step, alternated: is a change faster, when one run cannot tell?

On a shared or virtual machine the same binary's step moves by up to 30% from one run to the next
(docs/performance.md), more than most changes. This runs `train_step_bench --steps-only` from two
builds (or one build under two environments) one after the other for R rounds, pools every timed
step of every round per side, and prints the first quartile and the median of each and their ratio.

Usage:
  bench/ab_steps.py [--rounds R] [--threads N] [--steps S] [--heads H] [--precision fp32|bf16|both] OLD NEW
OLD and NEW are train_step_bench programs, each optionally prefixed by environment assignments:
  bench/ab_steps.py /tmp/before/train_step_bench build/train_step_bench
  bench/ab_steps.py --precision bf16 "EMBER_X=0@build/train_step_bench" "EMBER_X=1@build/train_step_bench"
The recipe's initial weights (h = 4, or --heads) are written once to a temporary file by NEW (--write-init).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def parse_side(spec):
    """'A=1,B=2@path' -> (path, {A: 1, B: 2}); 'path' -> (path, {})."""
    env = {}
    if "@" in spec:
        assigns, spec = spec.split("@", 1)
        for assign in assigns.split(","):
            name, _, value = assign.partition("=")
            env[name] = value
    return spec, env


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    # One value (not a list: a list would take OLD and NEW as more precisions).
    parser.add_argument("--precision", default="both", choices=["fp32", "bf16", "both"])
    args = parser.parse_args()
    args.precision = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    sides = {"old": parse_side(args.old), "new": parse_side(args.new)}
    for name, (path, _) in sides.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"ab_steps: {name}: {path} is not an executable train_step_bench")

    with tempfile.TemporaryDirectory() as work:
        init = os.path.join(work, f"init_h{args.heads}.safetensors")
        subprocess.run([sides["new"][0], "--write-init", init, "--heads", str(args.heads)], check=True,
                       stdout=subprocess.DEVNULL)
        steps = {}
        for round_index in range(args.rounds):
            for precision in args.precision:
                for name, (path, extra_env) in sides.items():
                    run = subprocess.run(
                        [path, "--init", init, "--heads", str(args.heads), "--threads", str(args.threads), "--steps",
                         str(args.steps), "--warmup", str(args.warmup), "--steps-only", "--precision", precision],
                        capture_output=True, text=True, env={**os.environ, **extra_env})
                    if run.returncode != 0:
                        sys.exit(f"ab_steps: {name} ({path}) failed in round {round_index + 1}:\n{run.stderr}")
                    steps.setdefault((precision, name), []).extend(json.loads(run.stdout)["step_ms_all"])
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    print(f"# h = {args.heads}: {args.rounds} alternated rounds of {args.steps} steps, {args.threads} threads; every "
          "step pooled")
    print(f"{'precision':<10}{'old p25':>9}{'old med':>9}{'new p25':>9}{'new med':>9}{'new/old p25':>13}{'new/old med':>13}")
    for precision in args.precision:
        old, new = sorted(steps[(precision, "old")]), sorted(steps[(precision, "new")])
        quartile = lambda xs: xs[len(xs) // 4]
        print(f"{precision:<10}{quartile(old):9.1f}{statistics.median(old):9.1f}{quartile(new):9.1f}"
              f"{statistics.median(new):9.1f}{quartile(new) / quartile(old):13.3f}"
              f"{statistics.median(new) / statistics.median(old):13.3f}")


if __name__ == "__main__":
    main()
