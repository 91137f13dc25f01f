#!/usr/bin/env bash
# Data parallelism on this machine, Ember and PyTorch side by side, in one run:
#   1. the recipe's training step (forward, backward, all-reduce, clipping, AdamW; the full 32 x 256
#      batch) on 1 process x 2 threads against 2 processes x 1 thread (mpirun): step time, tokens/s,
#      all-reduce time per step and the share of it hidden behind backward; Ember also without
#      overlap and with ZeRO-1; PyTorch's DistributedDataParallel over gloo (Debian's torch 1.13)
#      where it works;
#   2. the all-reduce of one step's gradients alone between two "hosts" (network namespaces joined
#      by a veth pair, scripts/two_hosts.sh), the link unlimited and limited to 10 and 1 Gbit/s
#      (tc tbf); skipped where namespaces cannot be made.
# Processes alternate over R rounds; every figure is the median over the rounds (each round's the
# median of S steps after 3 warm-up steps). The machine's load is printed before and after: other
# work on it slows the side that runs with it. Writes the JSON lines to runs/bench/scaling.jsonl.
#
# Usage: bench/scaling.sh [--rounds R] [--steps S] [--no-torch] [--no-link]
set -euo pipefail
rounds=3
steps=20
torch=1
link=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --no-link) link=0; shift ;;
    *) echo "usage: $0 [--rounds R] [--steps S] [--no-torch] [--no-link]" >&2; exit 2 ;;
  esac
done
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${EMBER_BUILD_DIR:-build}"
[[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
echo "building scaling_bench in $build ..." >&2
cmake --build "$build" --target scaling_bench -j 2 >&2
if [[ $torch == 1 ]]; then
  threads=2
  source bench/rival_env.sh  # python, torch_env; installs PyTorch when missing
  torch_2_threads=("${torch_env[@]}")
  threads=1
  source bench/rival_env.sh
  torch_1_thread=("${torch_env[@]}")
fi
mkdir -p runs/bench
out=runs/bench/scaling.jsonl
: >"$out"
mpirun=(bash scripts/mpirun.sh)
bench="$build/scaling_bench"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

run() {  # label, command...: one JSON line, tagged with the label and round
  local label=$1
  shift
  local line
  line=$("$@" 2>/dev/null | grep '^{' | tail -1) || true
  [[ -n "$line" ]] || line='{"failed": true}'
  echo "{\"label\": \"$label\", \"round\": $round, ${line:1}" >>"$out"
}
for round in $(seq "$rounds"); do
  echo "round $round/$rounds ..." >&2
  run ember_1x2 "$bench" --threads 2 --steps "$steps"
  run ember_2x1 "${mpirun[@]}" -np 2 "$bench" --threads 1 --steps "$steps"
  run ember_2x1_no_overlap "${mpirun[@]}" -np 2 "$bench" --threads 1 --steps "$steps" --no-overlap
  run ember_2x1_zero1 "${mpirun[@]}" -np 2 "$bench" --threads 1 --steps "$steps" --zero
  if [[ $torch == 1 ]]; then
    run torch_1x2 "${torch_2_threads[@]}" "$python" bench/scaling_torch.py --ranks 1 --threads 2 --steps "$steps"
    run torch_2x1 "${torch_1_thread[@]}" "$python" bench/scaling_torch.py --ranks 2 --threads 1 --steps "$steps"
  fi
done

link_note=""
if [[ $link == 1 ]]; then
  if why=$(bash scripts/two_hosts.sh check); then
    bash scripts/two_hosts.sh up
    round=1
    # Three bucket sizes per link: the cost model (bench/cost_model.py) fits a per-call and a per-byte term.
    for rate in none 10gbit 1gbit; do
      if [[ $rate == none ]]; then bash scripts/two_hosts.sh unshape; else bash scripts/two_hosts.sh shape "$rate"; fi
      for kb in 32 256 2048; do
        run "link_$rate" bash scripts/two_hosts.sh mpirun "$repo/$bench" --threads 1 --steps 10 --comm-only --bucket-kb $kb
      done
    done
    for kb in 32 256 2048; do
      run link_local "${mpirun[@]}" -np 2 "$bench" --threads 1 --steps 10 --comm-only --bucket-kb $kb
    done
    bash scripts/two_hosts.sh down
  else
    link_note="two-host link: skipped ($why)"
  fi
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$link_note" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(label, key):
    values = [r[key] for r in rows if r["label"] == label and key in r]
    return statistics.median(values) if values else None
def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)
print()
print("| run (recipe step, 32 x 256)          | step ms | tokens/s | all-reduce ms/step | hidden behind backward | MB sent/step |")
print("|---------------------------------------|--------:|---------:|-------------------:|-----------------------:|-------------:|")
names = {"ember_1x2": "Ember, 1 process x 2 threads", "ember_2x1": "Ember, 2 processes x 1 thread",
         "ember_2x1_no_overlap": "Ember, 2 x 1, no overlap", "ember_2x1_zero1": "Ember, 2 x 1, ZeRO-1",
         "torch_1x2": "PyTorch, 1 process x 2 threads", "torch_2x1": "PyTorch DDP (gloo), 2 x 1"}
for label, name in names.items():
    if med(label, "step_ms") is None:
        if any(r["label"] == label for r in rows):
            print(f"| {name:37} | (did not run: {rows[[r['label'] for r in rows].index(label)].get('skipped', 'failed')}) |")
        continue
    hidden = med(label, "hidden_share")
    mb = med(label, "bytes_per_step")
    print(f"| {name:37} | {fmt(med(label, 'step_ms')):>7} | {fmt(med(label, 'tokens_per_s'), '.0f'):>8} | "
          f"{fmt(med(label, 'allreduce_ms_per_step'), '.2f'):>18} | "
          f"{'-' if hidden is None or label.endswith('1x2') else format(100 * hidden, '.0f') + '%':>22} | "
          f"{'-' if mb is None or label.endswith('1x2') else format(mb / 1e6, '.2f'):>12} |")
for a, b, who in [("ember_2x1", "ember_1x2", "Ember"), ("torch_2x1", "torch_1x2", "PyTorch")]:
    x, y = med(a, "tokens_per_s"), med(b, "tokens_per_s")
    if x and y:
        print(f"{who}: 2 x 1 reaches {x / y:.2f}x the tokens/s of 1 x 2")
e, t = med("ember_2x1", "tokens_per_s"), med("torch_2x1", "tokens_per_s")
if e and t:
    print(f"Ember 2 x 1 / PyTorch DDP 2 x 1 tokens/s: {e / t:.2f}")
links = [r for r in rows if r["label"].startswith("link_")]
if links:
    print()
    print("| all-reduce of one step's gradients (comm only) | bucket KiB | all-reduce calls | ms/step | MB/step | Gbit/s through each link (ring: 2(n-1)/n x bytes) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in links:
        where = {"link_none": "two hosts, veth unlimited", "link_10gbit": "two hosts, 10 Gbit/s (tbf)",
                 "link_1gbit": "two hosts, 1 Gbit/s (tbf)", "link_local": "one host, shared memory"}[r["label"]]
        if "allreduce_ms_per_step" in r:
            print(f"| {where} | {r['bucket_kb']} | {r['collectives_per_step']} | {r['allreduce_ms_per_step']:.2f} | "
                  f"{r['bytes_per_step'] / 1e6:.2f} | {r['bus_gbit_per_s']:.2f} |")
        else:
            print(f"| {where} | failed | | | | |")
if sys.argv[2]:
    print(sys.argv[2])
EOF
if [[ $link == 1 ]]; then python3 bench/cost_model.py "$out"; fi
