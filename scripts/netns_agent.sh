#!/usr/bin/env bash
# Open MPI's "ssh" for scripts/two_hosts.sh: mpirun calls it as `netns_agent.sh HOST COMMAND...` to
# start its daemon on HOST; this runs COMMAND in the network namespace that plays HOST.
set -euo pipefail
host=$1
shift
case "$host" in
  10.77.0.1) ns=ember-h1 ;;
  10.77.0.2) ns=ember-h2 ;;
  *) echo "netns_agent: unknown host $host (scripts/two_hosts.sh plays 10.77.0.1 and 10.77.0.2)" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
