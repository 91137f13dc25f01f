#!/usr/bin/env python3
"""The docs' code cannot rot: every C++ block in docs/*.md must be a verbatim quote of a file in
the tree, named just above it as <!-- from: path -->, and that file is compiled (and, for
docs/snippets/*.cpp, run) by CI. Any other block may carry the same marker and is checked too.
docs/architecture.md's file tour must name only files that exist, and every source file.
Usage: docs_test.py <repository root>"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
failures, checked = [], 0

for doc in sorted((root / "docs").glob("*.md")):
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if not fence or not fence.group(1):
            i += 1
            continue
        language, start = fence.group(1), i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        block = lines[start:end]
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = re.match(r"^<!-- from: (\S+) -->$", lines[j].strip()) if j >= 0 else None
        where = f"{doc.relative_to(root)}:{i + 1}"
        if marker:
            source = root / marker.group(1)
            if not source.is_file():
                failures.append(f"{where}: {marker.group(1)} does not exist")
            else:
                text = [l.rstrip() for l in source.read_text(encoding="utf-8").splitlines()]
                want = [l.rstrip() for l in block]
                found = any(text[k:k + len(want)] == want for k in range(len(text) - len(want) + 1))
                if not found:
                    failures.append(f"{where}: the {language} block is not a verbatim quote of {marker.group(1)}")
                checked += 1
        elif language in ("cpp", "c++", "cuda"):
            failures.append(f"{where}: a {language} block without <!-- from: path --> (quote a compiled file)")
        i = end + 1

tour = root / "docs" / "architecture.md"
if tour.is_file():
    for path in sorted(set(re.findall(r"`((?:[\w.-]+/)+[\w.-]+\.(?:h|cpp|cu|md|sh|py|txt|json))`", tour.read_text()))):
        if not (root / path).exists():
            failures.append(f"docs/architecture.md names {path}, which does not exist")

    # ... and every source file of the framework and its examples, so the tour stays complete.
    named = tour.read_text()
    for folder in ("core", "autograd", "nn", "optim", "cuda", "examples", "tests/cuda_emulator"):
        for source in sorted((root / folder).rglob("*")):
            if source.suffix in (".h", ".cpp", ".cu") and f"`{source.relative_to(root)}`" not in named:
                failures.append(f"docs/architecture.md's tour does not name {source.relative_to(root)}")

for f in failures:
    print("FAIL:", f)
print(f"{checked} quoted blocks checked, {len(failures)} problems")
sys.exit(1 if failures else 0)
