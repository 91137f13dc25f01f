#!/usr/bin/env python3
"""docs/adding-an-op.md's count of places is true: take its worked op (rms_norm) out of a copy of the
tree, then put it back.

The doc marks each block of lines the op took with a tag, an HTML comment on a line of its own:
    <!-- rms_norm place N -->         above a <!-- from: path --> marker and its code block: a block of
                                      place N (1..6), quoted verbatim
    <!-- rms_norm place N: path, K lines from "FIRST" to "LAST" -->
                                      a range, not quoted: the K lines of path whose first line is FIRST (a
                                      line that occurs once in the file, matched whole) and whose last is LAST
    <!-- rms_norm place N: path, the whole file -->
    <!-- rms_norm optional ... -->    any of the three, for a block the op has that a new op need not write
In a copy of the tracked files (git ls-files) this deletes exactly those blocks (with one blank line
around each, where a blank line is on both sides) and the whole files, then checks that
  - nothing else in the source names the op: no "rms_norm" / "RMS norm" in any tracked file outside
    docs/ and the *.md files (so the blocks are all the op is);
  - the places are 1..N, N <= 6, each one block of lines in one file (a range, or quoted whole or in
    pieces with only blank lines between them), as the doc's "**N places in M files**" says;
and puts the blocks back (a quoted block from the doc's text, a range from the file) and checks that
every file is then byte-identical to the original. A quoted block must match the file byte for byte
and exactly once, and a range's count must land on its last line, so a change to the op's lines fails
here until the doc follows it, and a range cannot grow over code added after it.
So the ordinary build and tests of the tree (CPU and emulated GPU) are the build and test of the
re-added op. With --build it also builds the stripped copy's library (no CUDA, no tests): the tree
compiles without the op.
Before the tree, the script checks itself on a made-up tree: each planted mistake (a quote that is not
verbatim, a range that misses or is miscounted, a name left behind, a false count, a place in two
files or in pieces with code between, overlapping blocks, a misplaced tag) must fail, and the
clean made-up tree must pass.
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
TAG = re.compile(rf'^<!-- {OP} (?:place (\d+)|(optional))'
                 r'(?:: (\S+), (?:(the whole file)|(\d+) lines from "(.*)" to "(.*)"))? -->$')


def read_tags(doc_lines, fail):
    """The doc's blocks: (place or None, path, lines or None, where, range or None), and the whole files."""
    blocks, whole_files = [], {}
    for i, line in enumerate(doc_lines):
        m = TAG.match(line.strip())
        if not m:
            continue
        place = int(m.group(1)) if m.group(1) else None
        path, where = m.group(3), i + 1
        if m.group(4):
            whole_files[path] = place
            continue
        if m.group(5):
            blocks.append((place, path, None, where, (int(m.group(5)), m.group(6), m.group(7))))
            continue
        j = i + 1
        while j < len(doc_lines) and not doc_lines[j].strip():
            j += 1
        source = re.match(r"^<!-- from: (\S+) -->$", doc_lines[j].strip()) if j < len(doc_lines) else None
        fence = j + 1
        if not source or fence >= len(doc_lines) or not doc_lines[fence].startswith("```"):
            fail(f"{DOC}:{where}: the tag must stand just above a <!-- from: path --> marker and its code block")
            continue
        end = fence + 1
        while end < len(doc_lines) and doc_lines[end].rstrip() != "```":
            end += 1
        blocks.append((place, source.group(1), doc_lines[fence + 1:end], where, None))
    return blocks, whole_files


def locate(block, text, fail):
    """Where a block starts in its file's lines, and its lines; None where it is not there exactly once."""
    place, path, lines, where, span = block
    if span is None:
        hits = [k for k in range(len(text) - len(lines) + 1) if text[k:k + len(lines)] == lines]
        if len(hits) != 1:
            fail(f"{DOC}:{where}: the block is {'not a byte-verbatim quote' if not hits else 'found more than once'} "
                 f"in {path}")
            return None
        return hits[0], lines
    count, first, last = span
    starts = [k for k, line in enumerate(text) if line == first]
    if len(starts) != 1:
        fail(f'{DOC}:{where}: the range\'s first line "{first}" is ' +
             (f"not a line of {path}" if not starts else f"{len(starts)} lines of {path}: name a line that occurs once"))
        return None
    start, end = starts[0], starts[0] + count - 1
    if count < 1 or end >= len(text) or text[end] != last:
        # The hint for an edit of the op's lines: the line LAST nearest to where the count ends.
        candidates = [k - start + 1 for k in range(start, len(text)) if text[k] == last]
        nearest = min(candidates, key=lambda k: abs(k - count)) if candidates else None
        fail(f"{DOC}:{where}: line {count} of the range in {path} is "
             f"{repr(text[end]) if 1 <= count and end < len(text) else 'past the end of the file'}, not "
             f'"{last}"' + (f" (the nearest such line is its line {nearest})" if nearest else ""))
        return None
    return start, text[start:end + 1]


def check(root, tracked, doc_text, build=False, say=print):
    """The doc's blocks taken out of a copy of `tracked` (paths under root) and put back: the problems found."""
    failures = []
    fail = failures.append
    doc_lines = doc_text.splitlines()
    blocks, whole_files = read_tags(doc_lines, fail)
    if not blocks or not whole_files:
        fail(f"{DOC} tags no blocks of {OP} (<!-- {OP} place N -->) or no whole file")

    # ---- Where each block is in its file: exactly once, no two overlapping.
    original = {p: (root / p).read_bytes() for p in tracked}
    by_file = {}
    for block in blocks:
        place, path, _, where, _ = block
        if path not in original:
            fail(f"{DOC}:{where}: {path} is not a tracked file")
            continue
        found = locate(block, original[path].decode("utf-8").split("\n"), fail)
        if found:
            by_file.setdefault(path, []).append((found[0], len(found[1]), found[1], place, where))

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
        line_numbers = {}  # path: the original line number of each line of its stripped copy
        for path, found in by_file.items():
            found.sort(key=lambda f: f[0])
            text = original[path].decode("utf-8").split("\n")
            out, cursor, put_back = [], 0, []
            kept = []  # the original line number of each line of out
            for start, n, lines, place, where in found:
                if start < cursor:
                    fail(f"{DOC}:{where}: the block overlaps another block of {path}")
                    continue
                out += text[cursor:start]
                kept += range(cursor + 1, start + 1)
                end = start + n
                # A blank line on both sides: one goes with the block, so no double blank line is left.
                blank = start > 0 and end < len(text) - 1 and not text[start - 1].strip() and not text[end].strip()
                put_back.append((len(out), lines, blank))
                cursor = end + (1 if blank else 0)
            out += text[cursor:]
            kept += range(cursor + 1, len(text) + 1)
            (stripped_root / path).write_text("\n".join(out), encoding="utf-8")
            removed[path] = put_back
            line_numbers[path] = kept
        for path in whole_files:
            if path not in original:
                fail(f"{DOC}: the whole file {path} is not a tracked file")
            else:
                (stripped_root / path).unlink()

        # ---- Nothing else names the op.
        for p in tracked:
            if (p.startswith("docs/") or p.endswith(".md") or p == "tests/readd_op_test.py"
                    or not (stripped_root / p).exists()):
                continue
            try:
                text = (stripped_root / p).read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for n, line in enumerate(text.split("\n"), 1):
                if MENTION.search(line):
                    n = line_numbers[p][n - 1] if p in line_numbers else n
                    fail(f"{p}:{n}: names {OP} outside the doc's blocks: {line.strip()[:100]}")

        # ---- The count: places 1..N, N <= 6, one file each, as the doc says.
        place_files = {}
        for place, path, _, _, _ in blocks:
            if place is not None:
                place_files.setdefault(place, set()).add(path)
        for path, place in whole_files.items():
            if place is not None:
                place_files.setdefault(place, set()).add(path)
        if sorted(place_files) != list(range(1, len(place_files) + 1)) or len(place_files) > MAX_PLACES:
            fail(f"the places are {sorted(place_files)}: want 1..N, N <= {MAX_PLACES}")
        for place, files in sorted(place_files.items()):
            if len(files) != 1:
                fail(f"place {place} spans {sorted(files)}: a place is one block of lines in one file")
        # A place in pieces is still one block: only blank lines between its pieces.
        for path, found in by_file.items():
            text = original[path].decode("utf-8").split("\n")
            for (start, n, _, place, where), (next_start, _, _, next_place, _) in zip(found, found[1:]):
                if place == next_place and any(line.strip() for line in text[start + n:next_start]):
                    fail(f"{DOC}:{where}: place {place} is not one block of {path}: lines between its pieces")
        files = set().union(*place_files.values()) if place_files else set()
        claim = re.search(r"\*\*(\d+) places in (\d+) files\*\*", doc_text)
        if not claim or (int(claim.group(1)), int(claim.group(2))) != (len(place_files), len(files)):
            fail(f"{DOC} must say **{len(place_files)} places in {len(files)} files** (it says "
                 f"{claim.group(0) if claim else 'nothing'})")
        for place, files_of in sorted(place_files.items()):
            quoted = sum(len(b[2]) for b in blocks if b[0] == place and b[2] is not None)
            ranged = sum(b[4][0] for b in blocks if b[0] == place and b[4] is not None)
            say(f"place {place}: {', '.join(sorted(files_of))}" + (f", {quoted} lines quoted" if quoted else "")
                + (f", {ranged} lines by range" if ranged else "") + ("" if quoted or ranged else ", the whole file"))
        for place, path, lines, _, span in blocks:
            if place is None:
                say(f"optional: {path}, {len(lines)} lines quoted" if lines is not None else
                    f"optional: {path}, {span[0]} lines by range")

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
            say(f"the library without {OP}: built in {time.monotonic() - started:.0f} s")

        # ---- Put the op back: the tree is the original again, byte for byte.
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
    say(f"{len(blocks)} blocks of {OP} ({sum(1 for b in blocks if b[0] is None)} optional, "
        f"{sum(1 for b in blocks if b[4] is not None)} by range) in {len(by_file)} files, and {len(whole_files)} "
        f"whole file(s), taken out and put back: {len(failures)} problems")
    return failures


# ---- The self-test: a made-up tree with its doc, then one planted mistake at a time.
MADE_UP_TREE = {
    "ops.h": "#pragma once\nint other();\n\n// Normalises by the root mean square.\nint rms_norm(int x);\n\n"
             "int after();\n",
    "kernel.cpp": "int other() { return 1; }\n\n// ---- RMS norm\nint rms_norm(int x) {\n  return x;\n}\n\n"
                  "int after() { return 2; }\n",
    "test_rms_norm.cpp": "int main() { return rms_norm(1); }\n",
    "notes.md": "rms_norm may be named here.\n",
}
MADE_UP_DOC = """**3 places in 3 files**
<!-- rms_norm place 1 -->
<!-- from: ops.h -->
```cpp
// Normalises by the root mean square.
int rms_norm(int x);
```
<!-- rms_norm place 2: kernel.cpp, 4 lines from "// ---- RMS norm" to "}" -->
<!-- rms_norm place 3: test_rms_norm.cpp, the whole file -->
"""
PLANTED = [  # what is changed (in the doc, or in a file of the tree), and the failure it must give
    ("a quote that is not verbatim", "doc", "int rms_norm(int x);", "int rms_norm(int y);", "not a byte-verbatim quote"),
    ("a range's first line not in the file", "doc", '"// ---- RMS norm"', '"// ---- RMS Norm"', "is not a line of"),
    ("a range's first line twice in the file", "kernel.cpp", "int after() { return 2; }", "// ---- RMS norm",
     "2 lines of kernel.cpp"),
    ("a range one line short", "doc", "4 lines", "3 lines", "line 3 of the range in kernel.cpp is '  return x;'"),
    ("a range one line long", "doc", "4 lines", "5 lines", "line 5 of the range in kernel.cpp is ''"),
    ("a range past the end", "doc", "4 lines", "40 lines", "past the end of the file"),
    ("a name left behind", "kernel.cpp", "int after()", "int after_rms_norm()", "kernel.cpp:8: names rms_norm"),
    ("a false count", "doc", "**3 places in 3 files**", "**2 places in 3 files**", "must say **3 places in 3 files**"),
    ("a place in two files", "doc", "place 3:", "place 2:", "place 2 spans"),
    ("a gap in the places", "doc", "place 3:", "place 4:", "want 1..N"),
    ("code between a place's pieces", "doc", "square.\nint", "square.\n```\n<!-- rms_norm place 1 -->\n"
     "<!-- from: ops.h -->\n```cpp\nint", None),  # with ops.h's extra line below
    ("overlapping blocks", "doc", "<!-- rms_norm place 3",
     "<!-- rms_norm optional -->\n<!-- from: kernel.cpp -->\n```cpp\n  return x;\n```\n<!-- rms_norm place 3",
     "overlaps another block of kernel.cpp"),
    ("a tag with no code block under it", "doc", "<!-- from: ops.h -->\n", "", "must stand just above"),
    ("a range of a file that is not tracked", "doc", "kernel.cpp, 4", "kernels.cpp, 4", "not a tracked file"),
]


def self_test():
    problems = []
    cases = [("the clean made-up tree", None, None, None, None)] + PLANTED
    for name, where, old, new, want in cases:
        tree, doc = dict(MADE_UP_TREE), MADE_UP_DOC
        if name == "code between a place's pieces":
            tree["ops.h"] = tree["ops.h"].replace("square.\n", "square.\nint between();\n")
            want = "place 1 is not one block of ops.h: lines between its pieces"
        if where == "doc":
            doc = doc.replace(old, new, 1)
        elif where:
            tree[where] = tree[where].replace(old, new, 1)
        with tempfile.TemporaryDirectory(prefix="readd-self-test-") as made_up:
            made_up = pathlib.Path(made_up)
            for path, text in tree.items():
                (made_up / path).write_text(text, encoding="utf-8")
            got = check(made_up, sorted(tree), doc, say=lambda _: None)
        if want is None and got:
            problems.append(f"self-test: {name} fails: {got}")
        elif want is not None and not any(want in f for f in got):
            problems.append(f"self-test: {name} is not caught as '{want}': {got or 'no failure'}")
    print(f"self-test on a made-up tree: {len(cases) - len(problems)} of {len(cases)} cases as expected "
          f"(the clean tree passes, each of {len(PLANTED)} planted mistakes fails)")
    return problems


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    failures = self_test()
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        for f in failures:
            print("FAIL:", f)
        print("skipped: not a git checkout (the tracked files are the tree to copy)")
        sys.exit(1 if failures else 77)
    tracked = sorted(p for p in listed.decode().split("\0") if p and (root / p).is_file())
    failures += check(root, tracked, (root / DOC).read_text(encoding="utf-8"), build="--build" in sys.argv[2:])
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)
