#!/usr/bin/env python3
"""Turns a CUDA source (cuda/*.cu) into C++ that g++ compiles against the CPU emulator.

    python3 tests/cuda_emulator/translate.py cuda/softmax_kernels.cu build/emulated/softmax_kernels.cpp

CMake runs it at build time for every cuda/*.cu (target ember_emulated), and for every cuda/*.cuh
into emulated/cuda/ (a header's device code needs the same rewrites: cuda/row_kernels.cuh's
__shared__ array); only the copies are compiled, the sources stay real CUDA. Four rewrites, all outside comments and string literals:

1. A launch, `kernel<<<grid, block, shmem, stream>>>(a, b);` (the syntax is not C++), becomes
       ::ember_emu::launch(::ember_emu::config(grid, block, shmem, stream), "kernel",
                           [](auto&... ember_emu_args) { kernel(ember_emu_args...); }, a, b);
   The callee may be a template (`k<T><<<...>>>`) and the launch may span lines; parentheses are
   matched, so arguments may hold calls and commas. launch() evaluates a, b once, like a real
   launch, and each CUDA thread calls the kernel with copies of them.
2. `extern __shared__ T name[];` (the launch's dynamic shared memory) becomes
       T* name = ::ember_emu::dynamic_shared<T>();
3. `__shared__ T name[N];` becomes
       static thread_local T name[N]; ::ember_emu::poison_shared(&name, sizeof(name));
   Why one static copy is right: shared memory belongs to a block, and the emulator runs the
   blocks of a launch one after another, on the launching OS thread; the block's threads are
   fibers of that one OS thread. So at any moment one block uses the variable, and all of its
   threads see the same copy, which is what __shared__ means. (thread_local, not plain static,
   so that two host threads launching kernels at the same time cannot share it.) poison_shared
   fills it with 0xFF once at the start of each block, so a block cannot read what the previous
   one left there, nor anything never written.
4. Each `__global__` function gets, as its first statement,
       ::ember_emu::kernel_entry(reinterpret_cast<const void*>(&name<T...>));
   telling the launch which kernel runs (for its cudaFuncSetAttribute limits).
5. A kernel parameter `const __grid_constant__ T name` becomes `const T& name`: a reference to
   the launch's one copy of the argument, which is what __grid_constant__ means on a GPU (the
   parameter is read in place, by every thread, and cannot be changed); without it each CUDA
   thread would copy the struct (the element-wise kernels' shapes and operands, 72 to 80 bytes
   each) into its own parameter before running.

Every rewrite keeps the text's line breaks, and the output starts with `#line 1 "<the .cu>"`, so
compiler errors, __FILE__ / __LINE__ (the error messages of cuda/check.h, the emulator's barrier
reports) and debuggers point to the original .cu lines.
"""
import os
import re
import sys


def code_mask(text):
    """mask[i] is True where text[i] is code (not inside a comment, string or character literal)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isalnum()):  # not 1'000
            quote, j = text[i], i + 1
            while j < n and text[j] != quote:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            mask[k] = False
        i = j
    return mask


def find_code(text, mask, pattern, start=0):
    """Positions of `pattern` (a plain string) that begin in code."""
    i = text.find(pattern, start)
    while i >= 0:
        if mask[i]:
            yield i
        i = text.find(pattern, i + 1)


def match_forward(text, mask, i, open_ch, close_ch):
    """text[i] == open_ch; returns the index just past its matching close_ch."""
    depth = 0
    for j in range(i, len(text)):
        if not mask[j]:
            continue
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SyntaxError(f"unbalanced {open_ch}{close_ch} from offset {i}")


def line_of(text, i):
    return text.count("\n", 0, i) + 1


def callee_start(text, end):
    """The start of the kernel expression that ends at `end` (just before `<<<`)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments: k<T, 3>
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text, mask, path):
    edits = []
    for start in find_code(text, mask, "<<<"):
        begin = callee_start(text, start)
        callee = " ".join(text[begin:start].split())
        if not callee:
            raise SyntaxError(f"{path}:{line_of(text, start)}: a launch without a kernel name")
        # The configuration runs to the first `>>>` outside brackets.
        depth, j = 0, start + 3
        while True:
            if j >= len(text):
                raise SyntaxError(f"{path}:{line_of(text, start)}: no >>> closes this launch")
            if mask[j]:
                if text[j] in "([{":
                    depth += 1
                elif text[j] in ")]}":
                    depth -= 1
                elif depth == 0 and text.startswith(">>>", j):
                    break
            j += 1
        config = text[start + 3:j]
        k = j + 3
        while text[k].isspace():
            k += 1
        if text[k] != "(":
            raise SyntaxError(f"{path}:{line_of(text, start)}: expected ( after >>>")
        end = match_forward(text, mask, k, "(", ")")
        args = text[k + 1:end - 1]
        new = (f'::ember_emu::launch(::ember_emu::config({config}), "{callee}", '
               f"[](auto&... ember_emu_args) {{ {callee}(ember_emu_args...); }}"
               + (f", {args}" if args.strip() else "") + ")")
        old = text[begin:end]
        new += "\n" * (old.count("\n") - new.count("\n"))  # keep the line numbers
        edits.append((begin, end, new))
    return edits


SHARED_EXTERN = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([^;\[\]]*?)\s*\b(\w+)\s*\[\s*\]\s*;")
SHARED_STATIC = re.compile(r"__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([^;=]*?)\s*\b(\w+)\s*((?:\[[^\]]*\]\s*)*);")


GRID_CONSTANT = re.compile(r"\bconst\s+__grid_constant__\s+([A-Za-z_][\w:]*(?:\s*<[^<>()]*>)?)\s+(\w+)\s*(?=[,)])")


def rewrite_grid_constants(text, mask):
    edits = []
    for m in GRID_CONSTANT.finditer(text):
        if mask[m.start()]:
            edits.append((m.start(), m.end(), f"const {m.group(1)}& {m.group(2)}"))
    return edits


def rewrite_shared(text, mask):
    edits = []
    taken = set()
    for m in SHARED_EXTERN.finditer(text):
        if not mask[m.start()]:
            continue
        type_, name = m.group(1).strip(), m.group(2)
        edits.append((m.start(), m.end(), f"{type_}* {name} = ::ember_emu::dynamic_shared<{type_}>();"))
        taken.add(m.start() + m.group(0).index("__shared__"))
    for m in SHARED_STATIC.finditer(text):
        if not mask[m.start()] or m.start() in taken:
            continue
        type_, name, dims = m.group(1).strip(), m.group(2), m.group(3).strip()
        if "\n" in m.group(0):
            raise SyntaxError("a __shared__ declaration spanning lines is not supported")
        edits.append((m.start(), m.end(),
                      f"static thread_local {type_} {name}{dims}; ::ember_emu::poison_shared(&{name}, sizeof({name}));"))
    return edits


def template_arguments(header):
    """'template <typename T, int N, typename... Ts>' -> 'T, N, Ts...'."""
    inner = header[header.index("<") + 1:header.rindex(">")]
    params, depth, current = [], 0, ""
    for ch in inner:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            params.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        params.append(current)
    names = []
    for p in params:
        p = p.split("=")[0].strip()
        name = re.findall(r"\w+", p)[-1]
        names.append(name + ("..." if "..." in p else ""))
    return ", ".join(names)


def rewrite_kernels(text, mask, path):
    edits = []
    for start in find_code(text, mask, "__global__"):
        # The template header, if any, just before __global__.
        before = text[:start].rstrip()
        targs = None
        if before.endswith(">"):
            depth, i = 0, len(before)
            while i > 0:
                i -= 1
                if before[i] == ">":
                    depth += 1
                elif before[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            head = before[:i].rstrip()
            if head.endswith("template"):
                targs = template_arguments(before[len(head) - len("template"):])
        # The name: the identifier before the parameter list's "(" (skipping __launch_bounds__(...)).
        j = start + len("__global__")
        while True:
            paren = text.index("(", j)
            name = re.findall(r"\w+", text[j:paren])
            if name and name[-1] == "__launch_bounds__":
                j = match_forward(text, mask, paren, "(", ")")
                continue
            break
        if not name:
            raise SyntaxError(f"{path}:{line_of(text, start)}: cannot find the kernel's name")
        name = name[-1]
        close = match_forward(text, mask, paren, "(", ")")
        brace = text.index("{", close)
        if text[close:brace].strip() not in ("",):
            raise SyntaxError(f"{path}:{line_of(text, start)}: unexpected text between a kernel's ) and {{")
        target = f"&{name}<{targs}>" if targs else f"&{name}"
        edits.append((brace + 1, brace + 1, f" ::ember_emu::kernel_entry(reinterpret_cast<const void*>({target}));"))
    return edits


def translate(text, path):
    mask = code_mask(text)
    edits = (rewrite_launches(text, mask, path) + rewrite_shared(text, mask) + rewrite_kernels(text, mask, path) +
             rewrite_grid_constants(text, mask))
    edits.sort(key=lambda e: e[0])
    for a, b in zip(edits, edits[1:]):
        if a[1] > b[0]:
            raise SyntaxError(f"{path}:{line_of(text, b[0])}: overlapping rewrites")
    out = text
    for begin, end, new in reversed(edits):
        out = out[:begin] + new + out[end:]
    assert out.count("\n") == text.count("\n"), "a rewrite changed the line count"
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: translate.py in.cu out.cpp")
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    try:
        out = translate(text, src)
    except SyntaxError as e:
        sys.exit(f"translate.py: {e}")
    header = f"// Generated from {src} by tests/cuda_emulator/translate.py for the CPU emulator: do not edit.\n"
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(header + f'#line 1 "{src}"\n' + out)


if __name__ == "__main__":
    main()
