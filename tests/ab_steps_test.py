#!/usr/bin/env python3
"""bench/ab_steps.py against a stand-in train_step_bench whose step times are known: the pooled first
quartiles, medians and ratios it prints, the VAR=value@program form, and the errors for a program that
is missing or fails. Usage: ab_steps_test.py REPO_ROOT"""
import os
import stat
import subprocess
import sys
import tempfile

repo = sys.argv[1]
script = os.path.join(repo, "bench", "ab_steps.py")

# Step times base + 0, base + 1, ..., base + steps - 1 (bf16: base / 2 + the same), base from FAKE_BASE;
# FAKE_FAIL=1 makes the timed runs fail. --write-init writes the file it names.
FAKE = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
if "--write-init" in args:
    open(args[args.index("--write-init") + 1], "w").write("init")
    sys.exit(0)
if os.environ.get("FAKE_FAIL") == "1":
    sys.exit("fake: failing on purpose")
assert os.path.exists(args[args.index("--init") + 1]), "the init file ab_steps wrote"
steps = int(args[args.index("--steps") + 1])
base = float(os.environ.get("FAKE_BASE", "100"))
if args[args.index("--precision") + 1] == "bf16":
    base /= 2
print(json.dumps({"step_ms_all": [base + i for i in range(steps)]}))
'''

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED:", what)


with tempfile.TemporaryDirectory() as work:
    fake = os.path.join(work, "train_step_bench")
    with open(fake, "w") as f:
        f.write(FAKE)
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)

    run = subprocess.run([sys.executable, script, "--rounds", "2", "--steps", "10", f"FAKE_BASE=100@{fake}",
                          f"FAKE_BASE=90@{fake}"], capture_output=True, text=True)
    check(run.returncode == 0, f"a run of two stand-ins succeeds (stderr: {run.stderr})")
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in run.stdout.splitlines()
            if line.split() and line.split()[0] in ("fp32", "bf16")}
    # 2 rounds x 10 steps pooled: each value twice. fp32 old: 100..109 -> first quartile (index 5 of 20) 102,
    # median 104.5; new 90..99 -> 92, 94.5. bf16: 50..59 -> 52, 54.5; 45..54 -> 47, 49.5.
    check(rows.get("fp32") == [102.0, 104.5, 92.0, 94.5, round(92 / 102, 3), round(94.5 / 104.5, 3)],
          f"fp32 row: {rows.get('fp32')}")
    check(rows.get("bf16") == [52.0, 54.5, 47.0, 49.5, round(47 / 52, 3), round(49.5 / 54.5, 3)],
          f"bf16 row: {rows.get('bf16')}")
    check("2 alternated rounds of 10 steps" in run.stdout, "the header names rounds and steps")

    only = subprocess.run([sys.executable, script, "--rounds", "1", "--precision", "bf16", fake, fake],
                          capture_output=True, text=True)
    check(only.returncode == 0 and "fp32" not in only.stdout and "bf16" in only.stdout,
          "--precision bf16 runs and prints bf16 only")

    missing = os.path.join(work, "no_such_bench")
    gone = subprocess.run([sys.executable, script, missing, fake], capture_output=True, text=True)
    check(gone.returncode != 0 and "old" in gone.stderr and missing in gone.stderr,
          f"a missing program is named (stderr: {gone.stderr})")

    failing = subprocess.run([sys.executable, script, "--rounds", "1", fake, f"FAKE_FAIL=1@{fake}"],
                             capture_output=True, text=True)
    check(failing.returncode != 0 and "new" in failing.stderr and "failing on purpose" in failing.stderr,
          f"a failing program's side and message are reported (stderr: {failing.stderr})")

print("ab_steps_test:", "FAILED" if failures else "passed", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
