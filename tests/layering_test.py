#!/usr/bin/env python3
"""The layering of docs/architecture.md, checked over the #include lines of every source file of
core/, autograd/, nn/, optim/, cuda/ and examples/ (tests/, bench/ and docs/snippets/ may include
anything), and, given a build folder, over what each file defines and calls. Each rule below fails
with the file, the line and the include, or the call, that breaks it.

1. Upward only. The layers, bottom to top: core (core/: storage, tensors, the kernels, the creation
   ops of core/creation.h) < autograd (autograd/, and autograd/ops.h, the ops' declarations) <
   autograd/ops (the ops' definitions: each records its backward with autograd/node.h) < nn < optim
   < examples. A file includes only headers of its own layer or below.
2. The backends stay apart: core/cpu/ (the CPU kernels) never includes the GPU's side
   (core/cuda_ops.h), and the GPU's side never includes core/cpu/.
3. Only core and the ops reach the kernels: core/cpu/ and core/cuda_ops.h are included from core/,
   autograd/ops/ (and cuda/) alone; autograd, nn, optim and examples go through the ops
   (autograd/ops.h).
4. cuda/ implements the backend interface: it includes only cuda/ and core/ headers, and nothing
   outside cuda/ (but tests/) includes cuda/. Its .cu files are C++17 and reach neither Tensor nor
   fmt: no core/tensor.h, core/error.h, <fmt/...> or <nlohmann/...> anywhere in what they include.
5. The GPU's plumbing (core/device_copy.h, core/cuda_graph.h, core/copy_stream.h, core/allocator.h)
   is core's: autograd, nn, optim and examples include it only where tests/layering_allowed.py says
   why, and no core header they include pulls it in.
Given a build folder, the same rules hold for what each file defines and calls (its object file's
symbols, tests/layering_calls.py): a call goes to a file of its own layer or below (rule 1), the
CPU kernels and the GPU's side do not call each other (rule 2), only core calls the kernels and the
GPU's plumbing (rules 3 and 5; cuda/ is the GPU's side), cuda/ calls only cuda/ and core (rule 4),
and Tensor's members are defined in core/ (6). 7. bench/ includes no header of the IMDb program
(examples/imdb/): a benchmark times the framework, not the application. tests/layering_allowed.py lists the exceptions,
each with its reason (docs/architecture.md mirrors it); an exception that nothing needs any more
(no include, call or definition of the build the test reads would break a rule without it) fails
the test, naming it, so that the list shrinks with the code. Before checking, the call rules are run on
planted violations, which must each fail, so that a rule cannot quietly stop seeing.
Usage: layering_test.py <repository root> [<build folder> [<built library or program>...]]
(the libraries and programs are named so that scripts/test-area.sh builds them first)."""
import fnmatch
import pathlib
import re
import sys

from layering_allowed import ALLOWED_CALLS, ALLOWED_PLUMBING_INCLUDES, TENSOR_METHODS_ABOVE_CORE

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
CHECKED = ("core", "autograd", "nn", "optim", "cuda", "examples")
LEVEL = {"core": 0, "autograd": 1, "autograd/ops": 2, "nn": 3, "optim": 4, "examples": 5}
GPU_SIDE = {"core/cuda_ops.h", "core/cuda_ops_stubs.cpp"}
KERNEL_HEADERS = ("core/cpu/", "core/cuda_ops.h")
NOT_IN_CU = ("core/tensor.h", "core/error.h")
PLUMBING_HEADERS = {"core/device_copy.h", "core/cuda_graph.h", "core/copy_stream.h", "core/allocator.h"}
# Where the plumbing is defined: its own files, and the allocator's and copies' CPU stubs (core/cpu/)
# or their CUDA code (cuda/).
PLUMBING_FILES = ("core/copy_stream.cpp", "core/cuda_graph.cpp", "core/cpu/cpu_allocator.cpp", "cuda/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer(path):
    if path.startswith("autograd/ops/"):
        return "autograd/ops"
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
        if here != "core" and here != "autograd/ops" and target.startswith(KERNEL_HEADERS):  # rule 3
            failures.append(f"{where}: {here} reaches a device's kernels; go through the ops (autograd/ops.h)")

# Rule 7: a benchmark times the framework, not the application: bench/ includes no header of the IMDb program
# (the recipe's model is nn's, its batches a file the program writes: `imdb batches`). The seeds' classes
# (examples/seed_attention.h) are the code the framework is compared with, and may be included.
for path in sorted(str(p.relative_to(root)) for p in (root / "bench").rglob("*") if p.suffix in (".h", ".cpp", ".cu")):
    for number, quoted, name in includes(path):
        target = resolve(path, name) if quoted else None
        if target is not None and target.startswith("examples/imdb/"):
            failures.append(f"{path}:{number}: #include \"{name}\": a benchmark includes the IMDb program's header")

for path in sources:  # rule 4, the .cu files' C++17 world
    if not path.endswith(".cu"):
        continue
    headers, system = closure(path)
    for header in sorted(headers & set(NOT_IN_CU)):
        failures.append(f"{path}: reaches {header} through its includes (Tensor / fmt in a .cu file)")
    for name in sorted(system):
        if name.startswith(("fmt/", "nlohmann/")):
            failures.append(f"{path}: reaches <{name}> through its includes")


def below_ops(path):
    return layer(path) in ("core", "autograd/ops", "cuda")


USED_INCLUDE_ALLOWANCES = set()  # the (includer, header) pairs of ALLOWED_PLUMBING_INCLUDES met


def plumbing_include_failures():
    """Rule 5 over includes: each (includer, plumbing header) met walking the includes of the files
    above the ops, allowed or not."""
    allowed = {(includer, header) for includer, header, _ in ALLOWED_PLUMBING_INCLUDES}
    out, reported = [], set()
    for path in sources:
        if below_ops(path):
            continue
        seen, todo = {path}, [path]
        while todo:
            current = todo.pop()
            for number, quoted, name in includes(current):
                target = resolve(current, name) if quoted else None
                if target is None:
                    continue
                if target in PLUMBING_HEADERS and (current, target) in allowed:
                    USED_INCLUDE_ALLOWANCES.add((current, target))
                if target in PLUMBING_HEADERS and (current, target) not in allowed | reported:
                    reported.add((current, target))
                    why = ("a file above the ops includes the GPU's plumbing" if not below_ops(current) else
                           f"pulls the GPU's plumbing into {path} and every other file that includes it")
                    out.append(f"{current}:{number}: #include \"{name}\": {why} (tests/layering_allowed.py)")
                elif target not in seen and target not in PLUMBING_HEADERS:
                    seen.add(target)
                    todo.append(target)
    return out


failures += plumbing_include_failures()
for includer, header, _ in ALLOWED_PLUMBING_INCLUDES:  # an allowance nothing needs any more
    if (includer, header) not in USED_INCLUDE_ALLOWANCES:
        failures.append(f"tests/layering_allowed.py allows {includer} to include {header}, which no include "
                        "above the ops needs any more: remove the allowance (and its line in docs/architecture.md)")


def matches(path, pattern):
    return fnmatch.fnmatch(path, pattern) or (pattern.endswith("/") and path.startswith(pattern))


def tensor_method(name):
    """The member name of a demangled ember::Tensor::<member>(...) symbol, or None."""
    m = re.search(r"(?:^|[\s*&])ember::Tensor::(~?\w+)", name)  # after a template's return type
    return m.group(1) if m else None


def allowed_tensor_method(callee, name):
    return tensor_method(name) in TENSOR_METHODS_ABOVE_CORE.get(callee, ())


def allowance_for(caller, callee, name):
    """The index in ALLOWED_CALLS of the first allowance of this call, or None."""
    for index, (allowed_caller, allowed_callee, pattern, _) in enumerate(ALLOWED_CALLS):
        if matches(caller, allowed_caller) and matches(callee, allowed_callee) and re.fullmatch(pattern, name):
            return index
    return None


def call_problem(caller, callee, name, used=None):
    """Why calling `name`, defined in `callee`, from `caller` breaks the layering, or None. An allowance
    that lets a call through which the rules would refuse is noted in `used` (its index in
    ALLOWED_CALLS, or (file, method) of TENSOR_METHODS_ABOVE_CORE)."""
    why = rule_problem(caller, callee, name)
    if why is None:
        return None
    if allowed_tensor_method(callee, name):
        if used is not None:
            used.add((callee, tensor_method(name)))
        return None
    index = allowance_for(caller, callee, name)
    if index is not None:
        if used is not None:
            used.add(index)
        return None
    return why


def rule_problem(caller, callee, name):
    """Which rule calling `name`, defined in `callee`, from `caller` breaks, allowances aside, or None."""
    here, there = layer(caller), layer(callee)
    if here == "cuda":  # rule 4
        return None if there in ("cuda", "core") else "cuda/ calls only cuda/ and core"
    kernels = callee.startswith("core/cpu/") or callee in GPU_SIDE or there == "cuda"
    if caller.startswith("core/cpu/") and (callee in GPU_SIDE or there == "cuda"):  # rule 2
        return "the CPU kernels call the GPU's side"
    if caller in GPU_SIDE and callee.startswith("core/cpu/"):
        return "the GPU's side calls the CPU kernels"
    if not below_ops(caller) and callee.startswith(PLUMBING_FILES):  # rule 5
        return f"{here} calls the GPU's plumbing"
    if not below_ops(caller) and kernels:  # rule 3
        return f"{here} calls a device's kernels; go through the ops (autograd/ops.h)"
    if there != "cuda" and LEVEL[there] > LEVEL[here]:  # rule 1
        return f"{here} calls the higher layer {there}"
    return None


def call_failures(definitions, edges, used=None):
    out = []
    for source, names in sorted(definitions.items()):  # rule 6
        if layer(source) in ("core", "cuda"):
            continue
        for name in sorted(names):
            if not tensor_method(name):
                continue
            if allowed_tensor_method(source, name):
                if used is not None:
                    used.add((source, tensor_method(name)))
            else:
                out.append(f"{source} defines {name}: Tensor's members are defined in core/ "
                           "(or listed in tests/layering_allowed.py)")
    for (caller, callee), names in sorted(edges.items()):
        for name in names:
            why = call_problem(caller, callee, name, used)
            if why:
                out.append(f"{caller} calls {name} ({callee}): {why}")
    return out


def unused_allowances(objects, used):
    """The allowances of tests/layering_allowed.py that no call or definition of this build needs any
    more. An allowance is judged only where this build has an object file on each of its sides (a
    build without CUDA has none of cuda/, so it cannot tell whether an allowance for cuda/ is used)."""
    out = []
    for index, (caller, callee, pattern, _) in enumerate(ALLOWED_CALLS):
        built = lambda side: any(matches(source, side) for source in objects)
        if index not in used and built(caller) and built(callee):
            out.append(f"tests/layering_allowed.py allows {caller} to call /{pattern}/ in {callee}, which no call "
                       "of this build needs any more: remove the allowance (and its line in docs/architecture.md)")
    for source, methods in TENSOR_METHODS_ABOVE_CORE.items():
        if source not in objects:
            continue
        for method in sorted(methods):
            if (source, method) not in used:
                out.append(f"tests/layering_allowed.py lets {source} define Tensor::{method}, which it no longer "
                           "defines: remove it from the list (and from docs/architecture.md)")
    return out


# Planted violations, one per rule, each of which the call rules must report: {what: (caller,
# callee, name)}.
PLANTED = {
    "a CPU kernel calling an op": ("core/cpu/reduce.cpp", "autograd/ops/matmul.cpp", "ember::matmul(ember::Tensor)"),
    "core calling autograd": ("core/tensor.cpp", "autograd/node.cpp", "ember::record()"),
    "a Tensor method not on the list": ("core/tensor.cpp", "autograd/ops/views.cpp", "ember::Tensor::flip() const"),
    "nn calling a CPU kernel": ("nn/layers.cpp", "core/cpu/gemm.cpp", "ember::cpu::gemm()"),
    "the CPU kernels calling the GPU's side": ("core/cpu/reduce.cpp", "cuda/row_kernels.cu", "ember::cuda::reduce()"),
    "the trainer calling the plumbing": ("examples/imdb/batcher.cpp", "core/copy_stream.cpp",
                                         "ember::GpuEvent::record(ember::GpuStream)"),
    "an allowed name from another file": ("examples/imdb/batcher.cpp", "core/cuda_graph.cpp",
                                          "ember::CudaGraph::replay()"),
    "cuda/ calling an op": ("cuda/runtime.cu", "autograd/ops/binary.cpp", "ember::add()"),
}
PLANTED_DEFINITION = ("nn/layers.cpp", "ember::Tensor::view(std::vector<long> const&) const")


def planted_misses():
    misses = [what for what, (caller, callee, name) in PLANTED.items() if not call_problem(caller, callee, name)]
    source, name = PLANTED_DEFINITION
    if not call_failures({source: {name}}, {}):
        misses.append("a Tensor method defined in nn/")
    caller, callee, _, _ = ALLOWED_CALLS[0]  # an allowance of files that were built, with no call that needs it
    built = {side.replace("*", "planted.cpp"): None for side in (caller, callee)}
    if not unused_allowances(built, set()):
        misses.append("an allowance nothing needs")
    return misses


if len(sys.argv) > 2:
    import layering_calls

    build = pathlib.Path(sys.argv[2]).resolve()
    misses = planted_misses()
    failures += [f"the call rules miss a planted violation: {what}" for what in misses]
    objects, definitions, edges = layering_calls.calls(root, build)
    stale = [s for s, obj in objects.items() if obj.stat().st_mtime < (root / s).stat().st_mtime]
    if len(objects) < 50 or stale:
        failures.append(f"{build}: {len(objects)} object files, {len(stale)} older than their sources "
                        f"({', '.join(stale[:3])}): build ember, ember_imdb and imdb first")
    used = set()
    failures += call_failures(definitions, edges, used)
    failures += unused_allowances(objects, used)
    print(f"{len(objects)} object files read: {sum(len(n) for n in edges.values())} calls between files, "
          f"{len(PLANTED) + 2 - len(misses)} of {len(PLANTED) + 2} planted violations caught")

for f in failures:
    print("FAIL:", f)
print(f"{len(sources)} source files checked, {len(failures)} layering problems")
sys.exit(1 if failures else 0)
