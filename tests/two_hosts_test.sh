#!/usr/bin/env bash
# Two "hosts" on one machine (scripts/two_hosts.sh: network namespaces joined by a veth pair), one
# rank in each, talking TCP: the run must train to the same parameters, bit for bit, as the same
# 2-rank run on one host (shared memory), and each rank must really sit in its own namespace.
# Skipped (exit 77, with the reason) where namespaces cannot be made (not root, no CAP_NET_ADMIN).
# Usage: tests/two_hosts_test.sh path/to/imdb path/to/imdb_small.json
set -uo pipefail
imdb=$1
data=$2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
hosts="$here/../scripts/two_hosts.sh"
why=$(bash "$hosts" check) || { echo "skipped: $why"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"; bash "$hosts" down' EXIT
bash "$hosts" up || { echo "FAIL: could not make the two hosts"; exit 1; }
failures=0
train=(train --data "$data" --batch-size 32 --epochs 1 --threads 1 --quiet)

namespaces=$(bash "$hosts" mpirun sh -c 'echo "$OMPI_COMM_WORLD_RANK $(readlink /proc/self/ns/net)"' 2>&1 | sort)
if [ "$(awk '{print $2}' <<<"$namespaces" | sort -u | wc -l)" = 2 ]; then
  echo "PASS: one rank per namespace: $(tr '\n' ' ' <<<"$namespaces")"
else
  echo "FAIL: the ranks do not sit in two namespaces: $namespaces"; failures=$((failures + 1))
fi
if bash "$hosts" mpirun "$imdb" "${train[@]}" --out "$work/hosts" >"$work/hosts.log" 2>&1 &&
   bash "$here/../scripts/mpirun.sh" -np 2 "$imdb" "${train[@]}" --out "$work/local" >"$work/local.log" 2>&1; then
  if cmp -s "$work/hosts/model.safetensors" "$work/local/model.safetensors"; then
    echo "PASS: two hosts over TCP trained to the parameters of one host's 2 ranks, bit for bit"
  else
    echo "FAIL: the parameters differ between the two-host and the one-host run"; failures=$((failures + 1))
  fi
else
  echo "FAIL: a run failed"; tail -20 "$work/hosts.log" "$work/local.log"; failures=$((failures + 1))
fi
[ $failures -eq 0 ]
