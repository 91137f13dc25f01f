#!/usr/bin/env python3
"""docs/adding-an-op.md's count of places is true: take its worked op (rms_norm) out of a copy of the
tree, then put it back from the doc.

The doc marks each block of code the op took with a line above its <!-- from: path --> marker:
    <!-- rms_norm place N -->                       a block of place N (1..6), quoted verbatim
    <!-- rms_norm place N: path, the whole file --> place N is that whole file (the op's test)
    <!-- rms_norm optional -->                      a block the op has that a new op need not write
In a copy of the tracked files (git ls-files) this deletes exactly those blocks (with one blank line
around each, where a blank line is on both sides) and the whole files, then checks that
  - nothing else in the source names the op: no "rms_norm" / "RMS norm" in any tracked file outside
    docs/ and the *.md files (so the blocks are all the op is);
  - the places are 1..6, each one block of lines (quoted whole, maybe in pieces with only blank
    lines between them) in one file, in <= 6 files in all, as the doc's "**N places in M files**" says;
and puts the blocks back, the doc's text at the places they came from, and the whole files, and checks
that every file is then byte-identical to the original: the doc's blocks are exactly the op's lines.
So the ordinary build and tests of the tree (CPU and emulated GPU) are the build and test of the
re-added op. With --build it also builds the stripped copy's library (no CUDA, no tests): the tree
compiles without the op.
Usage: readd_op_test.py <repository root> [--build]. Exit 77 (skipped) outside a git checkout."""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

OP = "rms_norm"
DOC = "docs/adding-an-op.md"
MENTION = re.compile(r"rms[ _]?norm", re.IGNORECASE)  # the op's name, in code or in prose
MAX_PLACES = 6

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
build = "--build" in sys.argv[2:]
failures = []


def fail(message):
    failures.append(message)


try:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True, capture_output=True).stdout
except (OSError, subprocess.CalledProcessError):
    print("skipped: not a git checkout (the tracked files are the tree to copy)")
    sys.exit(77)
tracked = sorted(p for p in listed.decode().split("\0") if p and (root / p).is_file())

# ---- The doc's blocks of the op: (place or None for optional, path, lines) and the whole files.
doc_lines = (root / DOC).read_text(encoding="utf-8").splitlines()
tag = re.compile(rf"^<!-- {OP} (?:place (\d+)(?:: (\S+), the whole file)?|(optional)) -->$")
blocks, whole_files = [], {}
for i, line in enumerate(doc_lines):
    m = tag.match(line.strip())
    if not m:
        continue
    place = int(m.group(1)) if m.group(1) else None
    if m.group(2):
        whole_files[m.group(2)] = place
        continue
    j = i + 1
    while j < len(doc_lines) and not doc_lines[j].strip():
        j += 1
    source = re.match(r"^<!-- from: (\S+) -->$", doc_lines[j].strip()) if j < len(doc_lines) else None
    fence = j + 1
    if not source or fence >= len(doc_lines) or not doc_lines[fence].startswith("```"):
        fail(f"{DOC}:{i + 1}: the tag must stand just above a <!-- from: path --> marker and its code block")
        continue
    end = fence + 1
    while end < len(doc_lines) and doc_lines[end].rstrip() != "```":
        end += 1
    blocks.append((place, source.group(1), doc_lines[fence + 1:end], i + 1))

if not blocks or not whole_files:
    fail(f"{DOC} tags no blocks of {OP} (<!-- {OP} place N -->) or no whole file")

# ---- Where each block is in its file: exactly once, no two overlapping.
original = {p: (root / p).read_bytes() for p in tracked}
by_file = {}
for place, path, lines, where in blocks:
    if path not in original:
        fail(f"{DOC}:{where}: {path} is not a tracked file")
        continue
    text = original[path].decode("utf-8").split("\n")
    hits = [k for k in range(len(text) - len(lines) + 1) if text[k:k + len(lines)] == lines]
    if len(hits) != 1:
        fail(f"{DOC}:{where}: the block is {'not a byte-verbatim quote' if not hits else 'found more than once'} "
             f"in {path}")
        continue
    by_file.setdefault(path, []).append((hits[0], len(lines), lines, place, where))

# ---- The stripped copy.
# With --build, the copy lies in build-readd/ of the tree, its build in <copy>/build-fast: under ccache's
# base_dir the sources then have the relative paths of an ordinary build-fast/, so unchanged files hit.
if build:
    (root / "build-readd").mkdir(exist_ok=True)
work = pathlib.Path(tempfile.mkdtemp(prefix="readd-", dir=root / "build-readd" if build else None))
try:
    stripped_root = work / "tree"
    for p in tracked:
        (stripped_root / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / p, stripped_root / p)
    removed = {}  # path: [(index in the stripped file, lines put back, blank line after)]
    for path, found in by_file.items():
        found.sort()
        text = original[path].decode("utf-8").split("\n")
        out, cursor, put_back = [], 0, []
        for start, n, lines, place, where in found:
            if start < cursor:
                fail(f"{DOC}:{where}: the block overlaps another block of {path}")
                continue
            out += text[cursor:start]
            end = start + n
            # A blank line on both sides: one goes with the block, so no double blank line is left.
            blank = start > 0 and end < len(text) - 1 and not text[start - 1].strip() and not text[end].strip()
            put_back.append((len(out), lines, blank))
            cursor = end + (1 if blank else 0)
        out += text[cursor:]
        (stripped_root / path).write_text("\n".join(out), encoding="utf-8")
        removed[path] = put_back
    for path in whole_files:
        if path not in original:
            fail(f"{DOC}: the whole file {path} is not a tracked file")
        else:
            (stripped_root / path).unlink()

    # ---- Nothing else names the op.
    for p in tracked:
        if p.startswith("docs/") or p.endswith(".md") or p == "tests/readd_op_test.py" or not (stripped_root / p).exists():
            continue
        try:
            text = (stripped_root / p).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.split("\n"), 1):
            if MENTION.search(line):
                fail(f"{p}:{n}: names {OP} outside the doc's blocks: {line.strip()[:100]}")

    # ---- The count: places 1..6, one file each, <= 6 files, as the doc says.
    place_files = {}
    for place, path, lines, where in blocks:
        if place is not None:
            place_files.setdefault(place, set()).add(path)
    for path, place in whole_files.items():
        place_files.setdefault(place, set()).add(path)
    if sorted(place_files) != list(range(1, len(place_files) + 1)) or len(place_files) > MAX_PLACES:
        fail(f"the places are {sorted(place_files)}: want 1..N, N <= {MAX_PLACES}")
    for place, files in sorted(place_files.items()):
        if len(files) != 1:
            fail(f"place {place} spans {sorted(files)}: a place is one block of lines in one file")
    # A place quoted in pieces is still one block: only blank lines between its pieces.
    for path, found in by_file.items():
        text = original[path].decode("utf-8").split("\n")
        for (start, n, _, place, where), (next_start, _, _, next_place, _) in zip(found, found[1:]):
            if place == next_place and any(line.strip() for line in text[start + n:next_start]):
                fail(f"{DOC}:{where}: place {place} is not one block of {path}: lines between its pieces")
    files = set().union(*place_files.values()) if place_files else set()
    claim = re.search(r"\*\*(\d+) places in (\d+) files\*\*", "\n".join(doc_lines))
    if not claim or (int(claim.group(1)), int(claim.group(2))) != (len(place_files), len(files)):
        fail(f"{DOC} must say **{len(place_files)} places in {len(files)} files** (it says "
             f"{claim.group(0) if claim else 'nothing'})")
    for place, files_of in sorted(place_files.items()):
        lines = sum(len(b[2]) for b in blocks if b[0] == place)
        print(f"place {place}: {', '.join(sorted(files_of))}"
              + (f" ({lines} lines quoted)" if lines else " (the whole file)"))
    optional = [(b[1], len(b[2])) for b in blocks if b[0] is None]
    for path, n in optional:
        print(f"optional: {path} ({n} lines)")

    # ---- Optionally: the library builds without the op.
    if build:
        started = time.monotonic()
        build_dir = stripped_root / "build-fast"
        for command in (["cmake", "-S", str(stripped_root), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                         "-DEMBER_CUDA=OFF", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"],
                        ["cmake", "--build", str(build_dir), "--target", "ember", "-j2"]):
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                fail(f"the tree without {OP} does not build: {' '.join(command)}\n{result.stdout[-3000:]}"
                     f"{result.stderr[-3000:]}")
                break
        print(f"the library without {OP}: built in {time.monotonic() - started:.0f} s")

    # ---- Put the op back from the doc: the tree is the original again, byte for byte.
    for path, put_back in removed.items():
        lines = (stripped_root / path).read_text(encoding="utf-8").split("\n")
        offset = 0
        for index, block, blank in put_back:
            insert = block + ([""] if blank else [])
            lines[index + offset:index + offset] = insert
            offset += len(insert)
        (stripped_root / path).write_text("\n".join(lines), encoding="utf-8")
    for path in whole_files:
        if path in original:
            (stripped_root / path).write_bytes(original[path])
    for p in tracked:
        if (stripped_root / p).read_bytes() != original[p]:
            fail(f"{p}: not the original after the op was put back")
finally:
    shutil.rmtree(work, ignore_errors=True)

for f in failures:
    print("FAIL:", f)
optional_count = sum(1 for b in blocks if b[0] is None)
print(f"{len(blocks)} blocks of {OP} ({optional_count} optional) in {len(by_file)} files, and {len(whole_files)} "
      f"whole file(s), taken out and put back: {len(failures)} problems")
sys.exit(1 if failures else 0)
