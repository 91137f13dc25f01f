#!/usr/bin/env python3
"""tests/file_size_check.py against made-up trees: it must fail on a product file over the bar (naming it and
its length), on an exception without a reason and on one no longer needed; and pass a tree whose only long
files are outside the product folders or listed with a reason. The real tree is checked by ctest's file_size.
Usage: file_size_check_test.py <repository root>"""
import importlib.util
import pathlib
import subprocess
import sys
import tempfile
import unittest

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
checker_path = root / "tests" / "file_size_check.py"
spec = importlib.util.spec_from_file_location("file_size_check", checker_path)
checker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checker)
LIMIT = checker.LIMIT


def write(tree, path, lines):
    file = tree / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("".join(f"int line_{i};\n" for i in range(lines)))


class FileSizeCheck(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tree = pathlib.Path(self.dir.name)
        write(self.tree, "core/short.cpp", 10)
        write(self.tree, "cuda/at_the_bar.cu", LIMIT)  # the bar itself is allowed
        write(self.tree, "tests/long_test.cpp", LIMIT + 500)  # not a product file
        write(self.tree, "docs/long.md", LIMIT + 500)

    def tearDown(self):
        self.dir.cleanup()

    def test_a_clean_tree_passes(self):
        failures, count = checker.check(self.tree, {})
        self.assertEqual(failures, [])
        self.assertEqual(count, 2)

    def test_a_long_file_fails_named_with_its_length(self):
        write(self.tree, "nn/long.h", LIMIT + 1)
        write(self.tree, "scripts/long.sh", LIMIT + 40)
        write(self.tree, "examples/imdb/long.py", LIMIT + 2)
        failures, _ = checker.check(self.tree, {})
        self.assertEqual(failures, [
            f"examples/imdb/long.py: {LIMIT + 2} lines, over the bar of {LIMIT}: split it by what it does",
            f"nn/long.h: {LIMIT + 1} lines, over the bar of {LIMIT}: split it by what it does",
            f"scripts/long.sh: {LIMIT + 40} lines, over the bar of {LIMIT}: split it by what it does",
        ])

    def test_a_last_line_without_a_newline_counts(self):
        file = self.tree / "optim/no_newline.cpp"
        file.parent.mkdir(parents=True)
        file.write_text("int x;\n" * LIMIT + "int y;")
        failures, _ = checker.check(self.tree, {})
        self.assertEqual(failures, [f"optim/no_newline.cpp: {LIMIT + 1} lines, over the bar of {LIMIT}: "
                                    "split it by what it does"])

    def test_an_exception_with_a_reason_passes(self):
        write(self.tree, "bench/long.cpp", LIMIT + 1)
        failures, _ = checker.check(self.tree, {"bench/long.cpp": "a generated table, one entry a line"})
        self.assertEqual(failures, [])

    def test_an_exception_without_a_reason_fails(self):
        write(self.tree, "bench/long.cpp", LIMIT + 1)
        for reason in ("", "   ", None):
            failures, _ = checker.check(self.tree, {"bench/long.cpp": reason})
            self.assertEqual(failures, ["bench/long.cpp: an exception without a reason "
                                        "(tests/file_size_check.py, EXCEPTIONS)"], reason)

    def test_an_exception_no_longer_needed_fails(self):
        failures, _ = checker.check(self.tree, {"core/short.cpp": "was long once", "core/gone.cpp": "moved"})
        self.assertEqual(failures, [
            "core/gone.cpp: an exception for a file that is not a product file (gone or moved?)",
            f"core/short.cpp: 10 lines, back under the bar of {LIMIT}: drop its exception "
            "(tests/file_size_check.py, EXCEPTIONS)",
        ])

    def test_the_command_exits_1_and_names_the_file(self):
        write(self.tree, "autograd/long.cpp", LIMIT + 3)
        run = subprocess.run([sys.executable, str(checker_path), str(self.tree)], capture_output=True, text=True)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn(f"autograd/long.cpp: {LIMIT + 3} lines", run.stdout)
        (self.tree / "autograd/long.cpp").unlink()
        run = subprocess.run([sys.executable, str(checker_path), str(self.tree)], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
