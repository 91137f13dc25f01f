#!/usr/bin/env bash
# The trainer under mpirun, end to end, on the small IMDb file (200 train reviews: 7 global batches
# of 32 per epoch, 21 steps in 3 epochs):
#   - 2 x 16 and 3 x (11, 11, 10) ranks give the losses of one process on batches of 32, step by
#     step, to float tolerance (the sums go in another order), and the same test accuracy;
#   - evaluation shared over 3 ranks gives one process's accuracy; an ensemble on 2 ranks prints it once; imdb
#     nbsvm (one process's trainer) is refused;
#   - a checkpoint written by 2 ranks resumes on 1 and on 3 (also with ZeRO-1's sharded optimiser
#     state) and goes on as the one-process run did;
#   - ranks started with different settings stop at start-up, naming the setting;
#   - a rank killed (SIGKILL) makes the job end within a bounded time, with an error, and the
#     checkpoint rank 0 wrote still loads; a rank that stops answering (SIGSTOP) makes rank 0's
#     watchdog end the job after --dist-timeout; SIGTERM to one rank stops every rank at the same
#     step, checkpointed.
#   - masked-token pretraining on 2 ranks (also with ZeRO-1), resumed on 1, gives one process's losses; with
#     the CUDA emulator's imdb (a third argument) on 2 emulated GPU ranks too, their gradients over NCCL.
# Usage: tests/dist_trainer_test.sh path/to/imdb path/to/imdb_small.json [path/to/imdb_emulated]
set -uo pipefail
imdb=$1
data=$2
imdb_gpu=${3:-}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mpirun=(bash "$here/../scripts/mpirun.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
train=(train --data "$data" --batch-size 32 --epochs 3 --threads 1 --quiet)

# The losses of metrics.jsonl A's steps FROM..TO against B's: relative difference <= 1e-5.
same_losses() {
  python3 - "$@" <<'EOF'
import json, sys
a, b, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("kind") == "step"}
la, lb = losses(a), losses(b)
worst = 0.0
for s in range(first, last + 1):
    if s not in la or s not in lb:
        sys.exit(f"step {s} missing ({a}: {s in la}, {b}: {s in lb})")
    worst = max(worst, abs(la[s] - lb[s]) / abs(lb[s]))
print(f"steps {first}..{last}: largest relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
EOF
}
accuracy() { python3 -c "import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r.get('kind') == 'epoch'][-1]['test_accuracy'])" "$1"; }

# ---- One process on batches of 32; then 2 and 3 ranks on the same global batches.
"$imdb" "${train[@]}" --out "$work/one" >/dev/null || fail "one-process run"
for ranks in 2 3; do
  if "${mpirun[@]}" -np $ranks "$imdb" "${train[@]}" --out "$work/np$ranks" >"$work/np$ranks.log" 2>&1; then
    if same_losses "$work/np$ranks/metrics.jsonl" "$work/one/metrics.jsonl" 1 21; then
      pass "$ranks ranks: the 21 losses of one process"
    else
      fail "$ranks ranks: losses differ from one process's"
    fi
    [ "$(accuracy "$work/np$ranks/metrics.jsonl")" = "$(accuracy "$work/one/metrics.jsonl")" ] &&
      pass "$ranks ranks: the same test accuracy ($(accuracy "$work/one/metrics.jsonl"))" ||
      fail "$ranks ranks: test accuracy $(accuracy "$work/np$ranks/metrics.jsonl") vs $(accuracy "$work/one/metrics.jsonl")"
  else
    fail "$ranks ranks: the run failed"; tail -20 "$work/np$ranks.log"
  fi
done

# ---- Masked-token pretraining on 2 ranks: one process's losses, step by step; and a resume on 1 rank.
pretrain=(pretrain --data "$data" --dim 16 --heads 2 --layers 1 --ffn 32 --max-len 32 --batch-size 16 --steps 10 --threads 1 --quiet)
"$imdb" "${pretrain[@]}" --out "$work/pre1" >/dev/null 2>&1 || fail "pretrain, one process"
if "${mpirun[@]}" -np 2 "$imdb" "${pretrain[@]}" --stop-after 6 --out "$work/pre2" >"$work/pre2.log" 2>&1 &&
   "$imdb" "${pretrain[@]}" --resume --out "$work/pre2" >>"$work/pre2.log" 2>&1; then
  same_losses "$work/pre2/metrics.jsonl" "$work/pre1/metrics.jsonl" 1 10 &&
    pass "pretrain on 2 ranks, resumed on 1: the 10 losses of one process" || fail "pretrain on 2 ranks: losses differ"
else
  fail "pretrain on 2 ranks"; tail -20 "$work/pre2.log"
fi

if "${mpirun[@]}" -np 2 "$imdb" "${pretrain[@]}" --zero --stop-after 6 --out "$work/pre2z" >"$work/pre2z.log" 2>&1 &&
   "$imdb" "${pretrain[@]}" --resume --out "$work/pre2z" >>"$work/pre2z.log" 2>&1; then
  same_losses "$work/pre2z/metrics.jsonl" "$work/pre1/metrics.jsonl" 1 10 &&
    pass "pretrain on 2 ranks with ZeRO-1, resumed on 1: the 10 losses of one process" || fail "pretrain with ZeRO-1: losses differ"
else
  fail "pretrain on 2 ranks with ZeRO-1"; tail -20 "$work/pre2z.log"
fi
if [ -n "$imdb_gpu" ]; then
  for zero in "" --zero; do
    if "${mpirun[@]}" -np 2 "$imdb_gpu" "${pretrain[@]}" --device cuda $zero --out "$work/pre-gpu2$zero" \
        >"$work/pre-gpu2$zero.log" 2>&1; then
      same_losses "$work/pre-gpu2$zero/metrics.jsonl" "$work/pre1/metrics.jsonl" 1 10 &&
        pass "pretrain on 2 (emulated) GPU ranks over NCCL $zero: the 10 losses of one CPU process" ||
        fail "pretrain on 2 GPU ranks $zero: losses differ"
    else
      fail "pretrain on 2 GPU ranks $zero"; tail -20 "$work/pre-gpu2$zero.log"
    fi
  done
else
  echo "skipped: pretrain on 2 GPU ranks (no emulated imdb given)"
fi

# ---- Evaluation shared over 3 ranks: one process's accuracy.
one_eval=$("$imdb" eval --run "$work/one" --data "$data" --threads 1 2>/dev/null | sed 's/ (.*//')
three_eval=$("${mpirun[@]}" -np 3 "$imdb" eval --run "$work/one" --data "$data" --threads 1 2>/dev/null | sed 's/ (.*//')
[ -n "$one_eval" ] && [ "$one_eval" = "$three_eval" ] && pass "evaluation on 3 ranks: $three_eval" ||
  fail "evaluation on 3 ranks: '$three_eval', one process: '$one_eval'"
# An ensemble under mpirun: every rank evaluates it, rank 0 alone prints, one process's numbers.
ensemble=(eval --run "$work/one" --run "$work/one" --data "$data" --threads 1)
one_ensemble=$("$imdb" "${ensemble[@]}" 2>/dev/null)
two_ensemble=$("${mpirun[@]}" -np 2 "$imdb" "${ensemble[@]}" 2>/dev/null)
[ -n "$one_ensemble" ] && [ "$one_ensemble" = "$two_ensemble" ] && pass "an ensemble on 2 ranks prints once, one process's accuracy" ||
  fail "an ensemble on 2 ranks: '$two_ensemble', one process: '$one_ensemble'"
# NBSVM trains as one process: under mpirun it is refused with a usage error (exit 2), no folder written.
nbsvm_out=$("${mpirun[@]}" -np 2 "$imdb" nbsvm --data "$data" --buckets 4096 --out "$work/nb2" 2>&1)
code=$?
[ "$code" -ne 0 ] && grep -q "nbsvm runs as one process" <<<"$nbsvm_out" && [ ! -e "$work/nb2/nbsvm.safetensors" ] &&
  pass "nbsvm under mpirun: refused, naming why" || fail "nbsvm under mpirun: exit $code: $(tail -n 3 <<<"$nbsvm_out")"

# ---- Resume: 10 steps on 2 ranks (plain, and ZeRO-1), then the rest on 1 and on 3 ranks.
"${mpirun[@]}" -np 2 "$imdb" "${train[@]}" --stop-after 10 --out "$work/r2" >/dev/null 2>&1 || fail "2 ranks, 10 steps"
"${mpirun[@]}" -np 2 "$imdb" "${train[@]}" --zero --stop-after 10 --out "$work/z2" >/dev/null 2>&1 ||
  fail "2 ranks with ZeRO-1, 10 steps"
cp -r "$work/r2" "$work/r2to3"
cp -r "$work/z2" "$work/z2to1"
resume() {  # name, ranks, extra flags...
  local out=$1 ranks=$2
  shift 2
  if [ "$ranks" = 1 ]; then "$imdb" "${train[@]}" "$@" --resume --out "$work/$out" >/dev/null 2>&1
  else "${mpirun[@]}" -np "$ranks" "$imdb" "${train[@]}" "$@" --resume --out "$work/$out" >/dev/null 2>&1; fi
}
for case in "r2 1" "r2to3 3" "z2 3 --zero" "z2to1 1"; do
  set -- $case
  name=$1
  if resume "$@" && same_losses "$work/$name/metrics.jsonl" "$work/one/metrics.jsonl" 1 21; then
    pass "resume of a 2-rank checkpoint ($name) on $2 rank(s) ${*:3}: the one-process losses"
  else
    fail "resume $name on $2 rank(s) ${*:3}"
  fi
done

# ---- Different settings on different ranks: stopped at start-up, naming the setting.
out=$("${mpirun[@]}" -np 2 bash -c 'exec "$0" "$@" --lr $([ "$OMPI_COMM_WORLD_RANK" = 0 ] && echo 0.0005 || echo 0.001)' \
        "$imdb" "${train[@]}" --out "$work/mismatch" 2>&1)
status=$?
if [ $status -ne 0 ] && grep -q "the ranks were started with different settings: lr is 0.0005 on rank 0 but 0.001 on rank 1" <<<"$out" &&
   [ ! -e "$work/mismatch/metrics.jsonl" ]; then
  pass "different --lr on rank 1: stopped at start-up, naming lr"
else
  fail "different settings (status $status): $out"
fi

# ---- A rank that dies, and a rank that stops answering.
# The pid of rank R among the children of mpirun (pid M).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
# Starts a long run, waits for its first checkpoint, sends SIGNAL to rank 1, and expects the job to
# end within LIMIT seconds, with a non-zero status and output matching PATTERN.
failure_case() {  # name signal limit pattern extra-flags...
  local name=$1 signal=$2 limit=$3 pattern=$4
  shift 4
  "${mpirun[@]}" -np 2 "$imdb" train --data "$data" --batch-size 32 --epochs 60 --threads 1 --save-every 3 \
    --out "$work/$name" "$@" >"$work/$name.log" 2>&1 &
  local job=$!
  for _ in $(seq 600); do [ -e "$work/$name/checkpoint.safetensors" ] && break; sleep 0.1; done
  local victim
  victim=$(rank_pid "$job" 1)
  if [ -z "$victim" ]; then fail "$name: no rank 1 found"; kill "$job"; wait "$job"; return; fi
  local start=$SECONDS
  kill -"$signal" "$victim"
  local waited=0
  while kill -0 "$job" 2>/dev/null && [ $waited -lt $((limit * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$job" 2>/dev/null; then
    fail "$name: the job still runs $limit s after rank 1 got SIG$signal"
    kill -KILL "$job" "$victim" 2>/dev/null
    wait "$job"
    return
  fi
  wait "$job"
  local status=$? took=$((SECONDS - start))
  kill -KILL "$victim" 2>/dev/null  # a stopped rank may outlive the job
  if [ $status -ne 0 ] && grep -Eq "$pattern" "$work/$name.log"; then
    pass "$name: rank 1 got SIG$signal; the job ended in ${took} s (status $status) with: $(grep -Eo "$pattern" "$work/$name.log" | head -1)"
  else
    fail "$name: status $status after ${took} s; log:"; tail -15 "$work/$name.log"
  fi
  if "$imdb" check --run "$work/$name" >/dev/null 2>&1; then pass "$name: rank 0's last checkpoint loads"
  else fail "$name: the checkpoint does not load"; fi
}
failure_case killed KILL 30 "exited on signal 9|rank 1 .*(died|killed)"
# SIGTERM to one rank: every rank stops at the same step boundary (agreed after each step),
# checkpointed, and rank 0 says how to continue.
failure_case terminated TERM 30 "stopped by SIGTERM at step [0-9]+"
failure_case stopped STOP 40 "did not finish within 5 s: a peer process died, hangs" --dist-timeout 5

echo "$failures failure(s)"
[ $failures -eq 0 ]
