#!/usr/bin/env python3
"""Rewrites the paths of the ops' move (issue 46, part 4) in the tree's text files: the ops that record
graph nodes moved from core/ops/ and core/ops.h to autograd/ops/ and autograd/ops.h (they sit above
autograd), and the creation ops from core/ops/creation.cpp down to core/creation.cpp (declared in
core/creation.h). Every mention is rewritten: #include lines, CMake and script paths, comments and docs
(a docs page's `<!-- from: ... -->` marker names the file it quotes). docs/results/ (what was run, as it
was run) is left alone.
Run it again on files written before the move, e.g. on a branch merged after it:
    python3 scripts/move_ops_paths.py            # every file git tracks
    python3 scripts/move_ops_paths.py FILE...    # those files
A block of #include "..." lines that names the moved headers is sorted again, as the tree keeps them.
A file of core/ (but core/ops/) that includes core/ops.h for the creation ops wants core/creation.h
instead: the script says which it rewrote to autograd/ops.h there, for a hand's look."""
import pathlib
import re
import subprocess
import sys

REWRITES = [
    (re.compile(r"\bcore/ops/creation\.cpp\b"), "core/creation.cpp"),
    (re.compile(r"\bcore/ops\b"), "autograd/ops"),  # core/ops.h, core/ops/, core/ops
]
SKIPPED = ("docs/results/", "scripts/move_ops_paths.py")

root = pathlib.Path(__file__).resolve().parent.parent
files = sys.argv[1:] or subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                                       check=True).stdout.splitlines()
MOVED_INCLUDE = re.compile(r'^#include "(autograd/ops[./]|core/creation\.h")')


def sorted_includes(text):
    """text with each run of #include "..." lines that names a moved header in sorted order."""
    lines, out, block = text.split("\n"), [], []
    for line in lines + [None]:
        if line is not None and line.startswith('#include "'):
            block.append(line)
            continue
        out += sorted(block) if any(MOVED_INCLUDE.match(b) for b in block) else block
        block = []
        if line is not None:
            out.append(line)
    return "\n".join(out)


changed = []
for name in files:
    path = root / name
    if name.startswith(SKIPPED) or not path.is_file() or path.is_symlink():
        continue
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        continue  # not text
    new = text
    for pattern, replacement in REWRITES:
        new = pattern.sub(replacement, new)
    if path.suffix in (".h", ".cpp", ".cu", ".cuh"):
        new = sorted_includes(new)
    if new != text:
        path.write_text(new, encoding="utf-8")
        changed.append(name)
        if name.startswith("core/") and '#include "autograd/ops.h"' in new:
            print(f"{name}: includes autograd/ops.h now, above core: core/creation.h instead?")
print(f"{len(changed)} files rewritten")
