#!/usr/bin/env python3
"""The docs' code cannot rot: every C++ block in docs/*.md must be a verbatim quote of a file in
the tree, named just above it as <!-- from: path -->, and that file is compiled (and, for
docs/snippets/*.cpp, run) by CI. Any other block may carry the same marker and is checked too.
docs/architecture.md's file tour must name only files that exist, and every source file.
Every link of docs/*.md and README.md resolves: a relative link's file (and its #anchor, a heading of
that page), a `path` in backticks under one of the source folders, and a raw result cited as
`<commit>:docs/results/...` (the raw logs live in git history, docs/results.md), checked with git
where the commit is in the clone.
Usage: docs_test.py <repository root>"""
import pathlib
import re
import subprocess
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

# ---- Links and paths: every page's relative links, #anchors, backticked source paths and cited raw results.
pages = sorted((root / "docs").glob("*.md")) + [root / "README.md"]


def slug(heading):  # GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


anchors = {p.resolve(): {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", p.read_text(encoding="utf-8"), re.M)}
           for p in pages if p.is_file()}


def in_git(commit, path):  # True / False, or None where git or the commit is not there (a shallow clone)
    try:
        known = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
        if known.returncode != 0:
            return None
        return subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{commit}:{path.rstrip('/')}"],
                              capture_output=True).returncode == 0
    except OSError:
        return None


links = 0
for page in pages:
    if not page.is_file():
        continue
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(root)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page.resolve()
        links += 1
        if not resolved.exists():
            failures.append(f"{where}: the link ({target}) names a file that does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors.get(resolved, set()):
            failures.append(f"{where}: the link ({target}) names no heading of {path or where}")
    for path in re.findall(r"`((?:docs|bench|scripts|tests|core|autograd|nn|optim|cuda|examples)/[\w./-]+)`", text):
        links += 1
        if path.startswith("docs/results/"):
            failures.append(f"{where}: `{path}`: docs/results/ left the tree; cite it as `<commit>:{path}`")
        elif not (root / path).exists():
            failures.append(f"{where}: `{path}` does not exist")
    for commit, path in re.findall(r"`([0-9a-f]{7,40}):(docs/results/[\w./<>-]*)`", text):
        if "<" in path:
            continue  # a pattern (heads<H>-seed<S>), not a file
        links += 1
        if in_git(commit, path) is False:
            failures.append(f"{where}: `{commit}:{path}` is not in git history")

for f in failures:
    print("FAIL:", f)
print(f"{checked} quoted blocks checked, {links} links and paths checked, {len(failures)} problems")
sys.exit(1 if failures else 0)
