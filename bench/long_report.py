"""The tables of bench/long.sh from its JSON lines: checkpointing (Ember and PyTorch, with / without) and
window against full attention (Ember) with PyTorch's full attention beside, each with its ratios.
With --svg FILE, also the window table as a plot: step time and peak memory against T, log-log (a
straight line of slope 1 is linear growth, slope 2 quadratic), written as plain SVG (no plotting library)."""
import json
import math
import sys

MIB = 1024 * 1024


def svg_plot(series, title, unit, x0, y0, width=330, height=230):
    """One log-log panel at (x0, y0): series = [(label, colour, [(T, value), ...])]."""
    points = [p for _, _, pts in series for p in pts]
    xs, ys = [math.log2(t) for t, _ in points], [math.log10(v) for _, v in points]
    xmin, xmax = min(xs), max(xs)
    ymin, ymax = math.floor(min(ys)), math.ceil(max(ys))
    ymax = ymax if ymax > ymin else ymin + 1
    px = lambda t: x0 + 50 + (math.log2(t) - xmin) / max(xmax - xmin, 1e-9) * (width - 70)
    py = lambda v: y0 + height - 30 - (math.log10(v) - ymin) / (ymax - ymin) * (height - 60)
    out = [f'<text x="{x0 + width / 2}" y="{y0 + 14}" text-anchor="middle" font-weight="bold">{title}</text>',
           f'<rect x="{x0 + 50}" y="{y0 + 30}" width="{width - 70}" height="{height - 60}" fill="none" stroke="#999"/>']
    for e in range(ymin, ymax + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{x0 + 50}" y1="{y}" x2="{x0 + width - 20}" y2="{y}" stroke="#eee"/>')
        out.append(f'<text x="{x0 + 46}" y="{y + 4}" text-anchor="end" font-size="10">{10 ** e:g} {unit}</text>')
    for t in sorted({t for t, _ in points}):
        out.append(f'<text x="{px(t)}" y="{y0 + height - 16}" text-anchor="middle" font-size="10">{t}</text>')
    out.append(f'<text x="{x0 + width / 2}" y="{y0 + height - 2}" text-anchor="middle" font-size="10">T (tokens)</text>')
    first_t, first_v = sorted(series[0][2])[0]  # a slope-1 guide through the first series' first point
    last_t = max(t for t, _ in points)
    out.append(f'<line x1="{px(first_t):.1f}" y1="{py(first_v):.1f}" x2="{px(last_t):.1f}" '
               f'y2="{py(first_v * last_t / first_t):.1f}" stroke="#2ca02c" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{x0 + 56}" y="{y0 + 44 + 13 * len(series)}" font-size="10" fill="#2ca02c">'
               f'linear in T (guide)</text>')
    for i, (label, colour, pts) in enumerate(series):
        pts = sorted(pts)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                   + " ".join(f"{px(t):.1f},{py(v):.1f}" for t, v in pts) + '"/>')
        out += [f'<circle cx="{px(t):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>' for t, v in pts]
        out.append(f'<text x="{x0 + 56}" y="{y0 + 44 + 13 * i}" font-size="10" fill="{colour}">{label}</text>')
    return out


def write_svg(path, find, lengths, batch, window):
    time_series, memory_series = [], []
    for label, colour, framework, attention in [(f"Ember {window}", "#1f77b4", "ember", window),
                                                ("Ember full", "#d62728", "ember", "full"),
                                                ("PyTorch full", "#7f7f7f", "torch", "full")]:
        rows = [(t, find(framework, t, batch, attention)) for t in lengths]
        rows = [(t, r) for t, r in rows if r]
        if rows:
            time_series.append((label, colour, [(t, r["step_s"]) for t, r in rows]))
        if rows and framework == "ember":
            memory_series.append((label, colour, [(t, r["peak_tensor_bytes"] / MIB) for t, r in rows]))
    body = svg_plot(time_series, f"training step time, batch {batch}", "s", 0, 0)
    body += svg_plot(memory_series, "peak tensor memory (Ember)", "MiB", 340, 0)
    with open(path, "w") as f:
        f.write('<svg xmlns="http://www.w3.org/2000/svg" width="680" height="240" font-family="sans-serif" '
                'font-size="12">\n<rect width="680" height="240" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def main():
    svg = None
    if "--svg" in sys.argv:
        svg = sys.argv[sys.argv.index("--svg") + 1]
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    loads = [r.get("load_before") or r.get("load_after") for r in rows if "load_before" in r or "load_after" in r]
    runs = [r for r in rows if "framework" in r]

    def find(framework, length, batch, attention="full", checkpoint=False):
        for r in runs:
            if (r["framework"], r["len"], r["batch"], r["attention"], r["checkpoint"]) == (
                    framework, length, batch, attention, checkpoint):
                return r
        return None

    plain, ckpt = find("ember", 2048, 8), find("ember", 2048, 8, checkpoint=True)
    tplain, tckpt = find("torch", 2048, 8), find("torch", 2048, 8, checkpoint=True)
    if plain and ckpt:
        print("## Activation checkpointing: one training step at T = 2048, batch 8 (recipe model, full attention)\n")
        print("| | step time | with checkpointing | time ratio | peak memory | with checkpointing | memory ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print(f"| Ember (peak tensor bytes) | {plain['step_s']:.2f} s | {ckpt['step_s']:.2f} s | "
              f"**{ckpt['step_s'] / plain['step_s']:.2f}x** | {plain['peak_tensor_bytes'] / MIB:.0f} MiB | "
              f"{ckpt['peak_tensor_bytes'] / MIB:.0f} MiB | **{ckpt['peak_tensor_bytes'] / plain['peak_tensor_bytes']:.2f}x** |")
        if tplain and tckpt:
            print(f"| PyTorch {tplain['torch']} (RSS added by the steps) | {tplain['step_s']:.2f} s | {tckpt['step_s']:.2f} s | "
                  f"{tckpt['step_s'] / tplain['step_s']:.2f}x | {tplain['step_rss_bytes'] / MIB:.0f} MiB | "
                  f"{tckpt['step_rss_bytes'] / MIB:.0f} MiB | {tckpt['step_rss_bytes'] / max(tplain['step_rss_bytes'], 1):.2f}x |")
            print(f"\nEmber / PyTorch step time: {plain['step_s'] / tplain['step_s']:.2f}x without checkpointing, "
                  f"{ckpt['step_s'] / tckpt['step_s']:.2f}x with.")
        print()
    windows = sorted({r["attention"] for r in runs if r["attention"].startswith("window")},
                     key=lambda a: -int(a.split(":")[1].split(",")[0]))  # the widest first
    for window in windows:
        lengths = sorted({r["len"] for r in runs if r["attention"] == window})
        batch = next(r["batch"] for r in runs if r["attention"] == window)
        print(f"## Sliding-window attention ({window}) against full attention: one training step, batch {batch}\n")
        print("| T | Ember window | Ember full | full / window | Ember window peak | Ember full peak | full / window "
              "| PyTorch full | PyTorch full / Ember window | PyTorch full / Ember full |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for length in lengths:
            w, f, t = find("ember", length, batch, window), find("ember", length, batch), find("torch", length, batch)
            cells = [str(length), f"{w['step_s']:.3f} s" if w else "-", f"{f['step_s']:.3f} s" if f else "-",
                     f"**{f['step_s'] / w['step_s']:.1f}x**" if w and f else "-",
                     f"{w['peak_tensor_bytes'] / MIB:.0f} MiB" if w else "-",
                     f"{f['peak_tensor_bytes'] / MIB:.0f} MiB" if f else "-",
                     f"{f['peak_tensor_bytes'] / w['peak_tensor_bytes']:.1f}x" if w and f else "-",
                     f"{t['step_s']:.3f} s" if t else "-",
                     f"{t['step_s'] / w['step_s']:.1f}x" if t and w else "-",
                     f"{t['step_s'] / f['step_s']:.2f}x" if t and f else "-"]
            print("| " + " | ".join(cells) + " |")
        print()
        if svg and window == windows[0]:  # the plot: the first (widest) window
            write_svg(svg, find, lengths, batch, window)
            # The tables go beside the plot (runs/bench/long.md): the link is relative to that folder.
            print(f"![step time and peak memory against T]({svg.rsplit('/', 1)[-1]})\n")
    for load in loads:
        print(f"load: {load.strip()}  ")


if __name__ == "__main__":
    main()
