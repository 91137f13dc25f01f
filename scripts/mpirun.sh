#!/usr/bin/env bash
# mpirun with the settings Ember's scripts and tests use on one machine (Open MPI 4.1, Debian):
#   --oversubscribe        more ranks than cores is fine (the tests run 3 ranks on 2 cores);
#   --allow-run-as-root    when run as root (containers, CI);
#   --bind-to none         each rank's compute and communication threads may use any core;
#   --mca btl self,vader,tcp  shared memory between ranks of a machine, TCP between machines;
#   OMPI_MCA_mpi_yield_when_idle=1  a rank waiting in MPI yields its core rather than spin.
# Usage: scripts/mpirun.sh -np 2 build/imdb train ...   (any mpirun arguments; EMBER_MPIRUN_ARGS adds more)
set -euo pipefail
args=(--oversubscribe --bind-to none --mca btl self,vader,tcp)
[ "$(id -u)" -eq 0 ] && args+=(--allow-run-as-root)
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
# shellcheck disable=SC2086
exec mpirun "${args[@]}" ${EMBER_MPIRUN_ARGS:-} "$@"
