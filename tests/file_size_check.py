#!/usr/bin/env python3
"""The size bar: no product file over 800 lines. A file past it holds more than one idea; split it by what it
does (cuda/row_kernels.cu became a kernel file per op family and a header of what they share), not by
moving lines to a file of "more". The code is the documentation: a learner reads a file from top to bottom.

Product files: every .h, .cpp, .cu, .cuh, .py and .sh file under core/ autograd/ nn/ optim/ cuda/ examples/
bench/ scripts/ (tests/ and docs/ are not product files). A file over the bar fails the check, named with its
length, unless EXCEPTIONS below lists it with the reason it must stay whole. An exception without a reason
fails, and so does one that is no longer needed (its file gone, or back under the bar): the table says only
what is true. It is empty: keep it so where you can.
ctest runs it as `file_size` (label docs, with the layering and include checks); tests/file_size_check_test.py
checks that it fails where it must.
Usage: file_size_check.py <repository root>"""
import os
import pathlib
import sys

LIMIT = 800  # lines
FOLDERS = ("core", "autograd", "nn", "optim", "cuda", "examples", "bench", "scripts")
SUFFIXES = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh")

# Files allowed past the bar: path (from the repository root) -> why it cannot be split. A reason is
# required; an entry for a file that no longer needs one fails too.
EXCEPTIONS = {
}


def product_files(root):
    """The product files under root, as repository paths, sorted."""
    found = []
    for folder in FOLDERS:
        base = root / folder
        for directory, subdirs, files in os.walk(base):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d != "__pycache__")
            for name in files:
                if name.endswith(SUFFIXES):
                    found.append((pathlib.Path(directory) / name).relative_to(root).as_posix())
    return sorted(found)


def line_count(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def check(root, exceptions):
    """The failures, one line each (empty: the tree passes)."""
    failures = []
    lengths = {path: line_count(root / path) for path in product_files(root)}
    for path, reason in sorted(exceptions.items()):
        if not isinstance(reason, str) or not reason.strip():
            failures.append(f"{path}: an exception without a reason (tests/file_size_check.py, EXCEPTIONS)")
        elif path not in lengths:
            failures.append(f"{path}: an exception for a file that is not a product file (gone or moved?)")
        elif lengths[path] <= LIMIT:
            failures.append(f"{path}: {lengths[path]} lines, back under the bar of {LIMIT}: "
                            "drop its exception (tests/file_size_check.py, EXCEPTIONS)")
    for path, n in sorted(lengths.items()):
        if n > LIMIT and path not in exceptions:
            failures.append(f"{path}: {n} lines, over the bar of {LIMIT}: split it by what it does")
    return failures, len(lengths)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    failures, count = check(root, EXCEPTIONS)
    for line in failures:
        print(line)
    if failures:
        print(f"file_size_check: {len(failures)} problem(s) in {count} product files")
        return 1
    print(f"file_size_check: {count} product files, none over {LIMIT} lines"
          f"{f' but the {len(EXCEPTIONS)} listed' if EXCEPTIONS else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
