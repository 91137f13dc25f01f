#!/usr/bin/env python3
"""Reads what ptxas reports for every CUDA kernel at sm_90, and fails on spills or local memory.

    python3 tests/ptxas_check.py --nvcc /usr/local/cuda/bin/nvcc --out build/ptxas cuda/*.cu

Each .cu file is compiled for sm_90 alone (`-cubin -Xptxas -v`, the build's flags: -O3, C++17, the
repository root on the include path), and for every kernel ptxas's "N bytes stack frame, N bytes
spill stores, N bytes spill loads" is read. A kernel fails when it spills, or when it has a stack
frame (local memory) and is not listed in EXPECTED_LOCAL below with the reason it needs one. The
full ptxas report of each file is kept in --out (<file>.ptxas.log); the summary is printed, one
line per kernel with local memory or spills, and one line per file.
ctest runs it as `ptxas_sm90` (label cuda-build) wherever CMake found nvcc: this needs no GPU.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys

# Kernels allowed a stack frame (a regular expression on the demangled name -> why). Spills are
# never allowed. An entry here is a promise that the local memory is deliberate; keep it short.
EXPECTED_LOCAL = {
    r"random_fill_kernel": "normal_element's cos() of a double: libdevice's slow-path argument reduction "
                           "(Payne-Hanek) keeps a small array in local memory; the CPU's formula, kept for "
                           "the same numbers",
}

ENTRY = re.compile(r"Compiling entry function '([^']+)' for 'sm_90'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def demangle(names):
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def compile_one(nvcc, launcher, root, source, out_dir):
    log_path = os.path.join(out_dir, os.path.basename(source) + ".ptxas.log")
    cubin = os.path.join(out_dir, os.path.basename(source) + ".cubin")
    cmd = launcher + [nvcc, "-O3", "-DNDEBUG", "-DEMBER_WITH_CUDA=1", "-DEMBER_WITH_CUDNN=1", "-std=c++17",
                      "-I" + root, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", cubin, source]
    run = subprocess.run(cmd, capture_output=True, text=True)
    text = run.stdout + run.stderr
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n" + text)
    return source, run.returncode, text


def kernels_of(text):
    """[(mangled name, stack bytes, spill stores, spill loads)] in the order ptxas reports them."""
    out, current = [], None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            current = m.group(1)
            continue
        m = FRAME.search(line)
        if m and current is not None:
            out.append((current, int(m.group(1)), int(m.group(2)), int(m.group(3))))
            current = None
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nvcc", required=True)
    parser.add_argument("--launcher", default="", help="a compiler launcher such as ccache")
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("sources", nargs="+")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(args.out, exist_ok=True)
    launcher = [args.launcher] if args.launcher else []
    problems, total = [], 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda s: compile_one(args.nvcc, launcher, root, s, args.out), args.sources))
    for source, code, text in results:
        name = os.path.relpath(source, root)
        if code != 0:
            problems.append(f"{name}: nvcc failed (exit {code}); see {args.out}")
            print(text[-3000:])
            continue
        kernels = kernels_of(text)
        if not kernels:
            print(f"{name}: no kernels")  # host code only (cuBLAS, cuDNN, the runtime)
            continue
        names = demangle([k[0] for k in kernels])
        with_local = 0
        for mangled, stack, stores, loads in kernels:
            pretty = names[mangled]
            if stores or loads:
                problems.append(f"{name}: {pretty}: spills ({stores} bytes stored, {loads} bytes loaded)")
            if stack:
                with_local += 1
                why = next((r for p, r in EXPECTED_LOCAL.items() if re.search(p, pretty)), None)
                if why is None:
                    problems.append(f"{name}: {pretty}: {stack} bytes of local memory (stack frame), not expected")
                else:
                    print(f"  expected: {pretty}: {stack} bytes of local memory ({why})")
        total += len(kernels)
        print(f"{name}: {len(kernels)} kernels at sm_90, {with_local} with local memory")
    if total == 0:
        problems.append("no kernel found in ptxas's reports (was -Xptxas -v honoured?)")
    for p in problems:
        print("FAIL: " + p)
    print(f"{total} kernels checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
