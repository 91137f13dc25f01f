#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces ember-h1 and ember-h2 joined by a veth pair
# (10.77.0.1 <-> 10.77.0.2), so that mpirun starts one rank in each and they talk TCP over the link,
# as two machines would (Open MPI's launcher reaches the "remote" host through
# scripts/netns_agent.sh instead of ssh). Needs root (CAP_NET_ADMIN) and iproute2.
#   scripts/two_hosts.sh check               exit 0 when namespaces can be made here, 77 (and why) if not
#   scripts/two_hosts.sh up                  make them (again, from scratch)
#   scripts/two_hosts.sh shape RATE [DELAY]  limit the link, both ways: tc tbf at RATE (1gbit, 10gbit);
#                                            DELAY (0.5ms) with tc netem, when the kernel has it
#   scripts/two_hosts.sh unshape             remove the limits
#   scripts/two_hosts.sh mpirun ARGS...      mpirun -np 2 across the hosts: rank 0 in h1, rank 1 in h2
#   scripts/two_hosts.sh down                remove them
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
H1=ember-h1 H2=ember-h2 V1=ember-v1 V2=ember-v2 A1=10.77.0.1 A2=10.77.0.2

down() {
  ip netns del "$H1" 2>/dev/null || true
  ip netns del "$H2" 2>/dev/null || true
}

up() {
  down
  ip netns add "$H1"
  ip netns add "$H2"
  ip link add "$V1" type veth peer name "$V2"
  ip link set "$V1" netns "$H1"
  ip link set "$V2" netns "$H2"
  ip -n "$H1" addr add "$A1/24" dev "$V1"
  ip -n "$H2" addr add "$A2/24" dev "$V2"
  for ns in "$H1" "$H2"; do ip -n "$ns" link set lo up; done
  ip -n "$H1" link set "$V1" up
  ip -n "$H2" link set "$V2" up
}

shape() {
  local rate=$1 delay=${2:-}
  for end in "$H1:$V1" "$H2:$V2"; do
    local ns=${end%%:*} dev=${end##*:}
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
    if [ -n "$delay" ]; then
      # netem does both the delay and the rate; not every kernel has it.
      ip netns exec "$ns" tc qdisc add dev "$dev" root netem delay "$delay" rate "$rate" || {
        echo "two_hosts: tc netem is not available in this kernel: no delay (rate only)" >&2
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 1mbit latency 100ms
      }
    else
      ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 1mbit latency 100ms
    fi
  done
}

unshape() {
  ip netns exec "$H1" tc qdisc del dev "$V1" root 2>/dev/null || true
  ip netns exec "$H2" tc qdisc del dev "$V2" root 2>/dev/null || true
}

check() {
  command -v ip >/dev/null || { echo "two_hosts: iproute2 (ip) is not installed"; exit 77; }
  command -v mpirun >/dev/null || { echo "two_hosts: mpirun (openmpi-bin) is not installed"; exit 77; }
  local probe=ember-probe-$$
  if ! ip netns add "$probe" 2>/tmp/ember-netns-$$.err; then
    echo "two_hosts: cannot create a network namespace here: $(cat /tmp/ember-netns-$$.err)"
    rm -f /tmp/ember-netns-$$.err
    exit 77
  fi
  ip netns del "$probe"
  rm -f /tmp/ember-netns-$$.err
}

run_mpirun() {
  [ -e "/var/run/netns/$H1" ] || up
  local args=(--host "$A1,$A2" -np 2 --bind-to none
              --mca plm_rsh_agent "$repo/scripts/netns_agent.sh"
              --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
              -x OMPI_MCA_mpi_yield_when_idle=1)
  [ "$(id -u)" -eq 0 ] && args+=(--allow-run-as-root)
  for name in EMBER_DIST_TIMEOUT EMBER_NUM_THREADS EMBER_DATA; do [ -n "${!name:-}" ] && args+=(-x "$name"); done
  cd "$PWD"  # the ranks start in this folder on both "hosts" (one file system)
  exec ip netns exec "$H1" mpirun "${args[@]}" "$@"
}

case "${1:-}" in
  check) check ;;
  up) up ;;
  down) down ;;
  shape) shift; shape "$@" ;;
  unshape) unshape ;;
  mpirun) shift; run_mpirun "$@" ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
