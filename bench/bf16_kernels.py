#!/usr/bin/env python3
"""Ember's training step in float32 and in bf16 on each bfloat16 GEMM kernel, alternated: which kernel pays here?

"auto" picks vdpbf16ps only where it out-runs the float FMA (core/cpu/gemm.cpp); this checks that choice on
the whole step. Each round runs `train_step_bench` (h = 4, the recipe's batch) once per arm, one after the
other; every timed step of every round is pooled per arm, and each arm's first quartile and median are
printed with their ratio to float32's, and the median of the rounds' own ratios (docs/performance.md).

Usage: bench/bf16_kernels.py [--rounds R] [--threads N] [--steps S] [--kernels "avx512_bf16 rounded"]
                             [--lookups "gather scalar"] [--build DIR]
A kernel this CPU cannot run is left out (train_step_bench fails on EMBER_BF16_KERNEL naming it).
--lookups "gather scalar" adds bf16 arms that read the unary ops' tables each way (EMBER_BF16_LOOKUP,
core/cpu/table_lookup.h), to check the measured choice on the whole step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--kernels", default="avx512_bf16 rounded")
    parser.add_argument("--lookups", default="")
    parser.add_argument("--build", default=os.environ.get("EMBER_BUILD_DIR", "build"))
    args = parser.parse_args()
    bench = os.path.join(args.build, "train_step_bench")
    if not os.access(bench, os.X_OK):
        sys.exit(f"bf16_kernels: {bench} is not built (cmake --build {args.build} --target train_step_bench)")
    arms = [("fp32", "fp32", {}), ("bf16 auto", "bf16", {})]
    arms += [(f"bf16 {k}", "bf16", {"EMBER_BF16_KERNEL": k}) for k in args.kernels.split()]
    arms += [(f"bf16 lookup {way}", "bf16", {"EMBER_BF16_LOOKUP": way}) for way in args.lookups.split()]

    with tempfile.TemporaryDirectory() as work:
        init = os.path.join(work, "init_h4.safetensors")
        subprocess.run([bench, "--write-init", init, "--heads", "4"], check=True, stdout=subprocess.DEVNULL)

        def run(precision, env):
            return subprocess.run([bench, "--init", init, "--heads", "4", "--threads", str(args.threads), "--steps",
                                   str(args.steps), "--warmup", str(args.warmup), "--steps-only", "--precision",
                                   precision], capture_output=True, text=True, env={**os.environ, **env})

        usable = []
        for arm in arms:
            probe = run(arm[1], arm[2]) if arm[2] else None
            if probe is not None and probe.returncode != 0:
                print(f"# {arm[0]}: left out ({probe.stderr.strip().splitlines()[-1]})")
                continue
            usable.append(arm)
        steps, medians = {name: [] for name, _, _ in usable}, []
        for round_index in range(args.rounds):
            medians.append({})
            for name, precision, env in usable:
                result = run(precision, env)
                if result.returncode != 0:
                    sys.exit(f"bf16_kernels: {name} failed in round {round_index + 1}:\n{result.stderr}")
                data = json.loads(result.stdout)
                steps[name] += data["step_ms_all"]
                medians[-1][name] = data["step_ms"]
            print(f"round {round_index + 1}/{args.rounds}: " +
                  ", ".join(f"{name} {ms:.1f} ms" for name, ms in medians[-1].items()), flush=True)

    print(f"# {args.rounds} alternated rounds of {args.steps} steps, {args.threads} threads; every step pooled")
    fp32 = sorted(steps["fp32"])
    quartile = lambda xs: xs[len(xs) // 4]
    for name in steps:
        xs = sorted(steps[name])
        ratios = [m[name] / m["fp32"] for m in medians]
        print(f"{name:<18} first quartile {quartile(xs):7.1f} ms ({quartile(xs) / quartile(fp32):.3f}x float32), "
              f"median {statistics.median(xs):7.1f} ms ({statistics.median(xs) / statistics.median(fp32):.3f}x); "
              f"rounds' ratios: median {statistics.median(ratios):.3f}x, from {min(ratios):.3f}x to {max(ratios):.3f}x")


if __name__ == "__main__":
    main()
