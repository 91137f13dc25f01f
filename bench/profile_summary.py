"""Groups a `perf report --sort symbol` listing of a training step into the parts of the step.

Usage: perf report -i perf.data --no-children --sort symbol --header | python3 bench/profile_summary.py
Prints each group's share of the samples and its biggest symbols. Used by bench/profile.sh.
"""
import re
import sys

# First match wins: (group, pattern on the symbol name).
GROUPS = [
    ("GEMM micro-kernel", r"tile_with|::tile<|tile_any_size"),
    ("GEMM packing", r"pack_a|pack_b|gemm_block|scale_c"),
    ("attention outside GEMMs (masks, softmax, where)",
     r"cpu::.*attention|Dims const|row_exp_store_sum|row_max|row_dot|masked_softmax|softmax|select_kernel|masked_fill|forward_rows|backward_rows"),
    ("GELU", r"Gelu|erff|__erf"),
    ("dropout", r"dropout|apply_mask|mask_range"),
    ("element-wise add / mul / copies", r"math::Add|math::Mul|math::Sub|math::Div|MulScalar|AddScalar|cpu::copy|cpu::fill|memmove|memset|memcpy|add_into|cpu::scale"),
    ("layer norm", r"layer_norm|forward_kernel<float, (true|false), (true|false)>|backward_chunk"),
    ("reductions (bias grads, pooling)", r"reduce_kernel|reduce"),
    ("optimizer + clipping", r"optim::"),
    ("embedding, cross-entropy", r"embedding|scatter_rows|gather_rows|cross_entropy"),
    ("thread pool", r"ThreadPool|parallel_for"),
    ("kernel (page faults, scheduling)", r"^\[k\]"),
]


def short(symbol):
    """A readable name: the std::function wrapper, namespaces and template arguments dropped."""
    symbol = symbol.replace("std::_Function_handler<void (long, long), ", "")
    out, depth = "", 0
    for ch in symbol:  # drop <...> and (...) contents
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out += ch
    out = re.sub(r"\s+", " ", out).strip()
    for prefix in ("ember::cpu::detail::", "ember::cpu::", "ember::optim::", "ember::", "anonymous namespace::"):
        out = out.replace(prefix, "")
    return out.split("::_M_invoke")[0].split(" ")[0][:40]


def main():
    totals = {name: 0.0 for name, _ in GROUPS}
    totals["other"] = 0.0
    tops = {name: [] for name in totals}
    cpu_seconds = None
    for line in sys.stdin:
        count = re.match(r"# Event count \(approx.\): (\d+)", line)
        if count:  # cpu-clock counts nanoseconds
            cpu_seconds = int(count.group(1)) / 1e9
        m = re.match(r"\s*([\d.]+)%\s+(\[[.k]\])\s+(.*)", line)
        if not m:
            continue
        share, kind, symbol = float(m.group(1)), m.group(2), m.group(3).strip()
        text = f"{kind} {symbol}"
        group = next((name for name, pattern in GROUPS if re.search(pattern, text)), "other")
        if kind == "[k]":
            group = "kernel (page faults, scheduling)"
        totals[group] += share
        tops[group].append((share, symbol))
    if cpu_seconds:
        print(f"{cpu_seconds:.2f} CPU seconds sampled")
    for name, share in sorted(totals.items(), key=lambda item: -item[1]):
        if share < 0.05:
            continue
        top = ", ".join(f"{short(s[1])} {s[0]:.1f}%" for s in sorted(tops[name], reverse=True)[:2])
        print(f"{share:6.1f}%  {name:<52} {top}")


if __name__ == "__main__":
    main()
