#!/usr/bin/env python3
"""The layering of docs/architecture.md, checked over the #include lines of every source file of
core/, autograd/, nn/, optim/, cuda/ and examples/ (tests/, bench/ and docs/snippets/ may include
anything). Each rule below fails with the file, the line and the include that breaks it.

1. Upward only. The layers, bottom to top: core (core/ but core/ops/: storage, tensors, kernels,
   and core/ops.h, the ops' declarations) < autograd < core/ops (the ops' definitions: each records
   its backward with autograd/node.h) < nn < optim < examples. A file includes only headers of its
   own layer or below.
2. The backends stay apart: core/cpu/ (the CPU kernels) never includes the GPU's side (core/gpu.h,
   core/cuda_ops.h), and the GPU's side never includes core/cpu/.
3. Only core reaches the kernels: core/cpu/, core/gpu.h and core/cuda_ops.h are included from core/
   (and cuda/) alone; autograd, nn, optim and examples go through the ops (core/ops.h).
4. cuda/ implements the backend interface: it includes only cuda/ and core/ headers, and nothing
   outside cuda/ (but tests/) includes cuda/. Its .cu files are C++17 and reach neither Tensor nor
   fmt: no core/tensor.h, core/error.h, <fmt/...> or <nlohmann/...> anywhere in what they include.
Usage: layering_test.py <repository root>"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
CHECKED = ("core", "autograd", "nn", "optim", "cuda", "examples")
LEVEL = {"core": 0, "autograd": 1, "core/ops": 2, "nn": 3, "optim": 4, "examples": 5}
GPU_SIDE = {"core/gpu.h", "core/gpu.cpp", "core/cuda_ops.h", "core/cuda_ops_stubs.cpp"}
KERNEL_HEADERS = ("core/cpu/", "core/gpu.h", "core/cuda_ops.h")
NOT_IN_CU = ("core/tensor.h", "core/error.h")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer(path):
    if path.startswith("core/ops/"):
        return "core/ops"
    return path.split("/")[0]


def includes(path):
    """(line number, quoted?, name) of each #include of a file, comments and all."""
    out = []
    for number, line in enumerate((root / path).read_text(encoding="utf-8").splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            out.append((number, m.group(1) == '"', m.group(2)))
    return out


def resolve(path, name):
    """The repository path a quoted include names (from the root, or beside the file), or None."""
    for candidate in (root / name, (root / path).parent / name):
        if candidate.is_file():
            return str(candidate.resolve().relative_to(root))
    return None


def closure(path):
    """Every repository header and every <system> header that `path` reaches through includes."""
    seen, system, todo = set(), set(), [path]
    while todo:
        current = todo.pop()
        for _, quoted, name in includes(current):
            target = resolve(current, name) if quoted else None
            if target is None:
                system.add(name)
            elif target not in seen:
                seen.add(target)
                todo.append(target)
    return seen, system


failures = []
sources = sorted(str(p.relative_to(root)) for folder in CHECKED for p in (root / folder).rglob("*")
                 if p.suffix in (".h", ".cpp", ".cu"))
for path in sources:
    here = layer(path)
    for number, quoted, name in includes(path):
        if not quoted:
            continue
        where = f"{path}:{number}: #include \"{name}\""
        target = resolve(path, name)
        if target is None:
            failures.append(f"{where}: not a file of the repository")
            continue
        if target.startswith("tests/") or target.startswith("bench/"):
            failures.append(f"{where}: the framework includes its tests or benchmarks")
            continue
        there = layer(target)
        if here == "cuda":  # rule 4
            if there not in ("cuda", "core"):
                failures.append(f"{where}: cuda/ includes only cuda/ and core/ headers")
            continue
        if there == "cuda":
            failures.append(f"{where}: only cuda/ includes cuda/ (core/cuda_ops.h is the interface)")
            continue
        if LEVEL[there] > LEVEL[here]:  # rule 1
            failures.append(f"{where}: {here} includes the higher layer {there}")
        if path.startswith("core/cpu/") and target in GPU_SIDE:  # rule 2
            failures.append(f"{where}: the CPU kernels include the GPU's side")
        if path in GPU_SIDE and target.startswith("core/cpu/"):
            failures.append(f"{where}: the GPU's side includes the CPU kernels")
        if here != "core" and here != "core/ops" and target.startswith(KERNEL_HEADERS):  # rule 3
            failures.append(f"{where}: {here} reaches a device's kernels; go through the ops (core/ops.h)")

for path in sources:  # rule 4, the .cu files' C++17 world
    if not path.endswith(".cu"):
        continue
    headers, system = closure(path)
    for header in sorted(headers & set(NOT_IN_CU)):
        failures.append(f"{path}: reaches {header} through its includes (Tensor / fmt in a .cu file)")
    for name in sorted(system):
        if name.startswith(("fmt/", "nlohmann/")):
            failures.append(f"{path}: reaches <{name}> through its includes")

for f in failures:
    print("FAIL:", f)
print(f"{len(sources)} source files checked, {len(failures)} layering problems")
sys.exit(1 if failures else 0)
