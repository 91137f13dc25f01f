#!/usr/bin/env bash
# Installs what Ember needs to build (from Debian's packages) and configures + builds it.
# Usage: scripts/setup.sh [build-dir [target...]]   (default: build, every target). Safe to run
#        again: it skips what is there. scripts/train.sh builds only the trainer: setup.sh build imdb
#        scripts/setup.sh --deps-only   installs the packages only (the sanitizer scripts configure their own builds)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/fmt/format.h ] || need+=(libfmt-dev)
[ -f /usr/include/doctest/doctest.h ] || need+=(doctest-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/openssl/evp.h ] || need+=(libssl-dev)      # libcrypto: the dataset's SHA-1, run fingerprints
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)      # CLI11: the imdb program's flags
command -v ccache >/dev/null || need+=(ccache)    # every build compiles only what changed (CMakeLists.txt)
command -v python3 >/dev/null || need+=(python3)  # the docs test, the CUDA emulator's translator
# Open MPI: training on several processes (mpirun; docs/distributed.md) and its tests; iproute2 for
# the two-host test (network namespaces).
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

[ "$BUILD_DIR" = "--deps-only" ] && exit 0

# CUDA is used when nvcc is found (on PATH or in /usr/local/cuda); CPU-only otherwise.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${EMBER_CMAKE_ARGS:-} >/dev/null
shift || true
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
