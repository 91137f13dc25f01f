#!/usr/bin/env bash
# CI's ARM check: Ember cross-built for 64-bit ARM (aarch64) with Debian's cross compiler
# (scripts/aarch64-toolchain.cmake) into build-arm64/ (ARM_DIR), and the core, autograd and nn areas' tests
# run under qemu-aarch64 (not their slow tests; scripts/test-area.sh builds what they run). Without CUDA, MPI,
# the CUDA emulator or the benchmarks: the CPU side is what differs on ARM. Installs what it needs from
# Debian's packages: the cross compiler, qemu-user-static, and the arm64 libraries through multiarch
# (dpkg --add-architecture arm64). Times under emulation say nothing of an ARM CPU: none are reported.
#   scripts/arm64.sh          (.ci/run runs it through scripts/test.sh; EMBER_ARM64_CI=0 skips it there)
set -euo pipefail
cd "$(dirname "$0")/.."
ARM_DIR=${ARM_DIR:-build-arm64}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
bash scripts/setup.sh --deps-only  # the header-only libraries (doctest, nlohmann-json, CLI11) serve both
packages=(g++-aarch64-linux-gnu qemu-user-static libc6:arm64 libstdc++6:arm64 libfmt-dev:arm64 libssl-dev:arm64)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
  echo "arm64: installing ${packages[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${packages[@]}" >/dev/null
fi
if [ ! -f "$ARM_DIR/CTestTestfile.cmake" ]; then
  cmake -S . -B "$ARM_DIR" -DCMAKE_TOOLCHAIN_FILE=scripts/aarch64-toolchain.cmake -DCMAKE_BUILD_TYPE=Release \
    -DEMBER_CUDA=OFF -DEMBER_MPI=OFF -DEMBER_CUDA_EMULATOR=OFF -DEMBER_BENCH=OFF >"$ARM_DIR.configure.log" 2>&1 ||
    { cat "$ARM_DIR.configure.log"; exit 1; }
  rm -f "$ARM_DIR.configure.log"
fi
BUILD_DIR=$ARM_DIR bash scripts/test-area.sh "(core|autograd|nn)"
