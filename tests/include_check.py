#!/usr/bin/env python3
"""Include what you use, for the standard library: every source file includes, itself, the standard
header of each standard name it uses (a GPU machine's GCC 13 stopped at core/device.h, which used
uint8_t and leaned on GCC 12's <string> to bring <cstdint>).

The rule: a file that uses a name of tests/std_symbols.py (std::vector, std::memcpy, uint8_t,
size_t, assert...) has an #include of one of the headers the standard declares it in, in the file
itself. What a project header or another standard header happens to bring along does not count:
standard headers differ between GCC, clang's libc++ and their versions, and a project header may
drop an include it no longer needs. (The C headers count as their <c...> twins: <stdint.h> as
<cstdint>.) Comments and string literals are not read; a `std::` name the table lacks is a failure
too, so that the table grows with the code.
Checked: every .h, .cpp, .cu and .cuh file under core/ autograd/ nn/ optim/ cuda/ examples/ bench/
tests/ docs/snippets/ (or the files given after --files).
Usage: include_check.py <repository root> [--files FILE...]"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from std_symbols import BARE_FUNCTIONS, BARE_TYPES, C_HEADER, STD_NAMES, headers_of  # noqa: E402

FOLDERS = ("core", "autograd", "nn", "optim", "cuda", "examples", "bench", "tests", "docs/snippets")
SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<([^>]+)>", re.M)
STD_USE = re.compile(r"(?<![\w])std[ \t]*::[ \t]*(\w+)")
WORD = re.compile(r"(?<![\w.])(?<!\w::)(?<!>::)(?<!->)\b([A-Za-z_]\w*)\b")  # not a.x, p->x, T::x (but ::x)
# A word before "name(" that makes it a declaration (void free(...)), not a call; these keywords do not.
CALL_AFTER = {"return", "else", "do", "throw", "case", "co_return", "co_yield", "not", "and", "or"}


def strip(text):
    """The code without comments, string and character literals (each replaced by a space) and
    without preprocessor directives but #include ones; line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or c == "'":
            prev = text[i - 1] if i else " "
            if c == "'" and (prev.isalnum() or prev == "_"):  # a digit separator (1'000) or u8'x'
                word = re.search(r"[\w']*$", text[max(0, i - 64):i]).group(0)
                if word[:1].isdigit():
                    out.append(c)
                    i += 1
                    continue
            raw = re.search(r'(?:u8|[uUL])?R$', text[max(0, i - 3):i]) if c == '"' else None
            if raw:
                m = re.compile(r'"([^()\\ ]{0,16})\(').match(text, i)
                end = text.find(")" + m.group(1) + '"', m.end()) if m else -1
                j = n if end < 0 else end + len(m.group(1)) + 2
            else:
                j = i + 1
                while j < n and text[j] != c and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append(" " + "\n" * text.count("\n", i, min(j, n)))
            i = j
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    # Preprocessor lines (but #include): a #define's name or #ifdef's macro is not a use. A macro's
    # body is code, though: keep what follows the name of a #define.
    lines = []
    for line in code.split("\n"):
        m = re.match(r"[ \t]*#[ \t]*(\w+)(.*)", line)
        if m and m.group(1) == "define":
            lines.append(re.sub(r"^[ \t]+\w+(\([^)]*\))?", "", m.group(2)))
        elif m and m.group(1) not in ("include",):
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def included(code):
    """The standard headers a file includes itself (the C headers as their <c...> names)."""
    names = set()
    for name in INCLUDE.findall(code):
        names.add(name)
        if name in C_HEADER:
            names.add(C_HEADER[name])
    return names


def uses(code):
    """(line, name, headers) of the first use of each standard name; headers None if unknown."""
    found = {}
    body = INCLUDE.sub("", code)
    line_of = lambda pos: body.count("\n", 0, pos) + 1  # noqa: E731
    for m in STD_USE.finditer(body):
        key = ("std", m.group(1))
        if key not in found:
            found[key] = (line_of(m.start()), f"std::{m.group(1)}", headers_of(m.group(1), STD_NAMES))
    for m in WORD.finditer(body):
        name = m.group(1)
        if name in BARE_TYPES:
            table = BARE_TYPES
        elif name in BARE_FUNCTIONS and re.match(r"\s*\(", body[m.end():]):
            before = re.search(r"(\w+)\s*$", body[max(0, m.start() - 40):m.start()])
            if before and before.group(1) not in CALL_AFTER:
                continue  # a declaration of a function of that name, e.g. a member `void free(...)`
            table = BARE_FUNCTIONS
        else:
            continue
        key = ("", name)
        if key not in found:
            found[key] = (line_of(m.start()), name, headers_of(name, table))
    return sorted(found.values())


def check(path, text):
    """The failures of one file (text: its contents), as 'path:line: message' strings."""
    code = strip(text)
    have = included(code)
    failures = []
    for line, name, headers in uses(code):
        if headers is None:
            failures.append(f"{path}:{line}: {name} is not in tests/std_symbols.py: add it with its header")
        elif not have.intersection(headers):
            wanted = " or ".join(f"<{h}>" for h in headers[:3]) + (" (or another)" if len(headers) > 3 else "")
            failures.append(f"{path}:{line}: uses {name} without including {wanted}")
    return failures


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else ".").resolve()
    if "--files" in argv:
        files = [pathlib.Path(f).resolve() for f in argv[argv.index("--files") + 1:]]
    else:
        files = sorted(p for folder in FOLDERS for p in (root / folder).rglob("*")
                       if p.suffix in SUFFIXES and p.is_file())
    failures = []
    for path in files:
        shown = path.relative_to(root) if path.is_relative_to(root) else path
        failures += check(shown, path.read_text(encoding="utf-8"))
    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(files)} source files checked, {len(failures)} standard names used without their header")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
