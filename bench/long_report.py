"""The tables of bench/long.sh from its JSON lines: checkpointing (Ember and PyTorch, with / without) and
window against full attention (Ember) with PyTorch's full attention beside, each with its ratios."""
import json
import sys

MIB = 1024 * 1024


def main():
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
    lengths = sorted({r["len"] for r in runs if r["attention"].startswith("window")})
    if lengths:
        batch = next(r["batch"] for r in runs if r["attention"].startswith("window"))
        window = next(r["attention"] for r in runs if r["attention"].startswith("window"))
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
    for load in loads:
        print(f"load: {load.strip()}  ")


if __name__ == "__main__":
    main()
