"""Per-op time of a training step, forward and backward apart, from perf call stacks (bench/profile_ops.sh).

Usage: python3 bench/profile_ops.py STEPS NAME=perf-script.txt [NAME=perf-script.txt ...]
Each file is `perf script -F tid,time,ip,sym,dso` of `train_step_bench --steps-only --threads 1`, recorded
with `perf record -e cpu-clock -k CLOCK_MONOTONIC -F HZ --call-graph dwarf`; beside it, NAME.hz holds HZ
(default 999) and NAME.json the bench's output, whose timed_from_monotonic_s drops the warm-up steps.
With one thread every sample's stack reaches the op that caused it, so each sample is charged to:
  phase  forward (under Trainee::step's model forward or loss), backward (under Tensor::backward),
         optimizer (clipping, zero_grad, AdamW), or other (start-up, the first-loss pass);
  op     forward: the outermost ember:: function below the model's modules (ember::linear, operator+);
         backward: the op whose recorded lambda runs (linear, attention, ...), or "grad accumulation";
  kind   GEMM micro-kernel, GEMM packing, or other work, by the sample's innermost frame.
Prints ms per step (CPU time: samples / HZ / STEPS) per (phase, op) for each file, side by side, with the
GEMM micro-kernel's and the GEMM packing's part of each, and the ratio of the last file to the first.
"""
import collections
import json
import os
import re
import sys

HEADER = re.compile(r"^\s*\d+\s+(\d+\.\d+):\s*$")  # "  5822   834.036850:" (tid, time)
FRAME = re.compile(r"^\s+([0-9a-f]+)\s+(.*?)(?:\s+\((\S+)\))?$")


def function_name(symbol):
    """ember::linear(ember::Tensor const&, ...)+0x12 -> linear; template and argument lists dropped."""
    out, depth = "", 0
    for ch in symbol:
        if ch in "<(":
            if ch == "(" and depth == 0 and out.endswith("operator"):
                out += ch  # operator() keeps its parentheses
                continue
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out += ch
    out = out.split("+0x")[0].strip().split(" ")[-1]
    for prefix in ("ember::cpu::", "ember::", "(anonymous namespace)::"):
        out = out.replace(prefix, "")
    return out


def lambda_owner(symbol):
    """The function a lambda in `symbol` is defined in ("ember::linear"), or None: read backwards from
    "::{lambda" over the argument list, the template arguments and the qualified name."""
    at = symbol.find("::{lambda")
    if at < 0:
        return None
    i = at
    if symbol[:i].endswith(" const"):
        i -= len(" const")
    if i == 0 or symbol[i - 1] != ")":
        return None

    def skip_back(i, open_ch, close_ch):  # symbol[i - 1] == close_ch: index of its opening bracket
        depth = 0
        while i > 0:
            i -= 1
            if symbol[i] == close_ch:
                depth += 1
            elif symbol[i] == open_ch:
                depth -= 1
                if depth == 0:
                    return i
        return 0

    i = skip_back(i, "(", ")")
    name_end = i
    if i > 0 and symbol[i - 1] == ">":
        i = name_end = skip_back(i, "<", ">")
    j = i
    while j > 0 and (symbol[j - 1].isalnum() or symbol[j - 1] in "_:+-*/=!<>[]"):
        if symbol[j - 1] in "<>" and not symbol[:j].rstrip("<>=").endswith("operator"):
            break
        j -= 1
        if symbol[:j].endswith("(anonymous namespace)"):
            j -= len("(anonymous namespace)")
    name = symbol[j:name_end].replace("(anonymous namespace)::", "")
    return name if name.startswith("ember::") else None


def kind_of(frames):
    """GEMM micro-kernel, GEMM packing, kernel (the OS) or other, by the innermost frame."""
    if not frames:
        return "other"
    symbol, dso = frames[0]
    if dso and "kernel" in dso:
        return "kernel"
    if re.search(r"tile_with|tile_any_size|::tile<", symbol):
        return "gemm"
    if re.search(r"pack_a|pack_b|gemm_block|scale_c", symbol):
        return "pack"
    return "other"


def classify(frames):
    """(phase, op) of one sample; frames innermost first."""
    outer = [symbol for symbol, _ in reversed(frames)]  # outermost first
    if not any("Trainee::step" in s for s in outer):
        return "other", "outside the step"
    for i, s in enumerate(outer):
        if "ember::Tensor::backward" in s:
            for inner in outer[i + 1:]:
                owner = lambda_owner(inner)
                if owner:
                    return "backward", function_name(owner + "(")
                if "accumulate_leaf_grad" in inner:
                    return "backward", "leaf grad accumulation"
                if re.search(r"ember::operator\+", inner):
                    return "backward", "grad accumulation"
                if "topological_order" in inner:
                    return "backward", "graph walk"
            return "backward", "engine"
        if re.search(r"optim::|clip_grad_norm|zero_grad", s):
            return "optimizer", function_name(s)
        if "TransformerClassifier::forward" in s or re.match(r"ember::cross_entropy", s):
            if re.match(r"ember::cross_entropy", s):
                return "forward", "cross_entropy"
            for inner in outer[i + 1:]:
                if inner.startswith("ember::") and not inner.startswith("ember::nn::") and "Module" not in inner:
                    return "forward", function_name(inner)
            return "forward", "modules"
    return "other", "step (outside ops)"


def load(path, timed_from=0.0):
    """Samples per (phase, op, kind), those taken before `timed_from` (CLOCK_MONOTONIC seconds) left out."""
    counts = collections.Counter()
    frames = []
    when = None

    def flush():
        if when is not None and when >= timed_from:
            phase, op = classify(frames)
            counts[(phase, op, kind_of(frames))] += 1

    with open(path, errors="replace") as f:
        for line in f:
            header = HEADER.match(line)  # checked first: a short tid is padded with spaces, like a frame
            m = None if header else FRAME.match(line)
            if m:
                frames.append((m.group(2), m.group(3) or ""))
            elif line.strip():
                flush()
                frames = []
                when = float(header.group(1)) if header else 0.0
    flush()
    return counts


def main():
    steps = int(sys.argv[1])
    runs = []
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        stem = os.path.splitext(path)[0]
        hz = float(open(stem + ".hz").read()) if os.path.exists(stem + ".hz") else 999.0
        # train_step_bench's JSON says when its timed steps began: the warm-up steps are left out
        timed_from = json.load(open(stem + ".json")).get("timed_from_monotonic_s", 0.0) if os.path.exists(stem + ".json") else 0.0
        runs.append((name, load(path, timed_from), hz))
    ms = []  # per run: (phase, op) -> [total, GEMM micro-kernel, GEMM packing]
    for name, counts, hz in runs:
        table = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
        for (phase, op, kind), n in counts.items():
            t = 1e3 * n / hz / steps
            for key in ((phase, op), (phase, "(all)")):
                table[key][0] += t
                if kind == "gemm":
                    table[key][1] += t
                if kind == "pack":
                    table[key][2] += t
        ms.append(table)
    keys = sorted(set().union(*ms), key=lambda k: (k[0], -ms[0].get(k, [0])[0]))
    header = f"{'phase':<10} {'op':<24}" + "".join(f" {n + ' ms':>9} {'kernel':>7} {'packing':>7}" for n, _, _ in runs)
    if len(runs) > 1:
        header += f" {runs[-1][0] + '/' + runs[0][0]:>10}"
    print(header)
    for phase in ("forward", "backward", "optimizer", "other"):
        rows = [k for k in keys if k[0] == phase]
        rows.sort(key=lambda k: (k[1] != "(all)", -ms[0].get(k, [0, 0, 0])[0]))
        for key in rows:
            values = [table.get(key, [0.0, 0.0, 0.0]) for table in ms]
            if max(v[0] for v in values) < 0.05:
                continue
            line = f"{phase:<10} {key[1][:24]:<24}" + "".join(f" {v[0]:9.1f} {v[1]:7.1f} {v[2]:7.1f}" for v in values)
            if len(runs) > 1 and values[0][0] > 0:
                line += f" {values[-1][0] / values[0][0]:9.2f}x"
            print(line)
    totals = [sum(v[0] for k, v in table.items() if k[1] == "(all)" and k[0] != "other") for table in ms]
    line = f"{'step':<10} {'fwd + bwd + optimizer':<24}" + "".join(f" {t:9.1f} {'':7} {'':7}" for t in totals)
    if len(runs) > 1 and totals[0] > 0:
        line += f" {totals[-1] / totals[0]:9.2f}x"
    print(line)


if __name__ == "__main__":
    main()
