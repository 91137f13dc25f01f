#!/usr/bin/env python3
"""tests/include_check.py against planted files in a temporary tree: it must fail on the header that
stopped GCC 13 (core/device.h using uint8_t with only <string>), on a name a file gets only through a
project header or another standard header, and on a std:: name its table lacks; and pass the same
files once they include what they use, and names that appear only in comments or strings.
Usage: include_check_test.py <repository root>"""
import pathlib
import subprocess
import sys
import tempfile

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
checker = root / "tests" / "include_check.py"

DEVICE_H = """#pragma once
#include <string>
namespace ember {
enum class DeviceType : uint8_t { CPU, CUDA };
std::string name(DeviceType type);
}
"""
# (failing file contents, what the report must say) ; the fixed contents must pass.
CASES = [
    ("core/device.h", DEVICE_H, "core/device.h:4: uses uint8_t without including <cstdint>",
     DEVICE_H.replace("#include <string>", "#include <cstdint>\n#include <string>")),
    ("core/vec.cpp", '#include "core/device.h"\nstd::string label() { return "x"; }\n',
     "core/vec.cpp:2: uses std::string without including <string>",
     '#include <string>\n#include "core/device.h"\nstd::string label() { return "x"; }\n'),
    ("nn/sort.cpp", "#include <vector>\nvoid f(std::vector<int>& v) { std::sort(v.begin(), v.end()); }\n",
     "nn/sort.cpp:2: uses std::sort without including <algorithm>",
     "#include <algorithm>\n#include <vector>\nvoid f(std::vector<int>& v) { std::sort(v.begin(), v.end()); }\n"),
    ("tests/copy.cu", "#include <cstdint>\nvoid f(void* a, const void* b, size_t n) { memcpy(a, b, n); }\n",
     "tests/copy.cu:2: uses memcpy without including <cstring>",
     "#include <cstring>\n#include <cstdint>\nvoid f(void* a, const void* b, size_t n) { memcpy(a, b, n); }\n"),
    ("tests/pid.cpp", "#include <string>\nstd::string f() { return std::to_string(::getpid()); }\n",
     "tests/pid.cpp:2: uses getpid without including <unistd.h>",
     "#include <string>\n#include <unistd.h>\nstd::string f() { return std::to_string(::getpid()); }\n"),
    ("bench/odd.cpp", "int f() { return std::no_such_thing(1'000); }\n",
     "bench/odd.cpp:1: std::no_such_thing is not in tests/std_symbols.py", None),
]
# Names in comments and literals, members named like C functions, digit separators: no use.
CLEAN = """// std::vector, uint8_t and memcpy in a comment
/* std::map<int64_t, FILE*> */
#include <cstdint>
struct Pool { void free(void* p); int size_t_count = 1'000'000; };
void Pool::free(void*) {}
void g(Pool& p) { p.free(nullptr); }
const char* text = "std::thread size_t assert(x)";
const char* raw = R"(std::mutex "int32_t")";
char c = 'x';
std::int64_t n = 0;
"""


def run(tree):
    result = subprocess.run([sys.executable, str(checker), str(tree)], capture_output=True, text=True)
    return result.returncode, result.stdout


def write(tree, files):
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)


failures = []
with tempfile.TemporaryDirectory() as tmp:
    tree = pathlib.Path(tmp)
    write(tree, {"core/clean.cpp": CLEAN})
    code, out = run(tree)
    if code != 0:
        failures.append(f"names in comments, strings and members counted as uses:\n{out}")
    for path, bad, message, good in CASES:
        write(tree, {path: bad})
        code, out = run(tree)
        if code == 0 or message not in out:
            failures.append(f"{path}: expected a failure saying '{message}', got (exit {code}):\n{out}")
        if good is None:
            (tree / path).unlink()
            continue
        write(tree, {path: good})
        code, out = run(tree)
        if code != 0:
            failures.append(f"{path}: the fixed file still fails:\n{out}")

for failure in failures:
    print("FAIL:", failure)
print(f"{len(CASES) + 1} planted cases, {len(failures)} failures")
sys.exit(1 if failures else 0)
