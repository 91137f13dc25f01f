#!/usr/bin/env bash
# CI's second distribution: Ember built and tested on Debian 13 ("trixie": GCC 14 and 13, CMake 3.31, CLI11
# 2.4, fmt 10; the toolchain generation of Ubuntu 24.04), in a root that debootstrap makes from Debian's
# packages, with this tree bound into it read-only at /src:
#   1. GCC 14 builds the library, the CUDA backend (the host's nvcc, /usr/local/cuda bound into the root, with
#      GCC 14 as its host compiler; for sm_90 alone: which GCC nvcc accepts does not depend on the GPU
#      generation) and the tests, and runs the core, autograd, nn, optim, imdb and cuda-emulated areas (not
#      their slow tests: scripts/test-area.sh);
#   2. GCC 13 compiles and links every target (fmt compiled into Ember: Debian 13's libfmt.so needs GCC 14's
#      libstdc++; CMakeLists.txt's EMBER_FMT_COMPILED_IN), at -O0 (compiled, not optimised: nothing of it runs). But for the CUDA
#      emulator's copies (EMBER_CUDA_EMULATOR=OFF): the same cuda/*.cu that nvcc compiles here with GCC 13 as
#      its host compiler, again as host C++ (GCC 14 compiles them above); a fifth of the GCC 13 build, left out
#      for CI's time (README, "Machines").
# The root is kept in EMBER_DEBIAN13_ROOT (default /var/cache/ember/debian13) between runs, with the two
# compilers' ccache inside it, and made again when missing or when its package list below changes (about six
# minutes, downloads included). Needs root (debootstrap, chroot, mount): sudo otherwise.
#   scripts/debian13.sh          (.ci/run runs it through scripts/test.sh; EMBER_DEBIAN13_CI=0 skips it there)
# Its last line: "debian13: ..." with both results.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${EMBER_DEBIAN13_ROOT:-/var/cache/ember/debian13}
JOBS=${JOBS:-$(nproc)}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# python3: the CUDA emulator's translator (the tests that need torch skip without it).
packages=(g++-14 g++-13 cmake make libfmt-dev doctest-dev nlohmann-json3-dev libssl-dev libcli11-dev python3 ccache)
start=$(date +%s)

# Whatever is mounted under the root (by this script, or left by a run that was killed), innermost first.
unmount_all() {
  local mounted
  mounted=$(awk -v root="$ROOT/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r)
  for m in $mounted; do $SUDO umount "$m" 2>/dev/null || $SUDO umount -l "$m"; done
}
unmount_all
trap unmount_all EXIT

wanted="debootstrap --variant=minbase trixie: ${packages[*]}"
if [ "$(cat "$ROOT/.ember-root" 2>/dev/null)" != "$wanted" ]; then
  if ! command -v debootstrap >/dev/null; then
    echo "debian13: installing debootstrap"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >/dev/null
  fi
  echo "debian13: making the Debian 13 root in $ROOT (debootstrap)"
  $SUDO rm -rf "$ROOT.new"
  $SUDO mkdir -p "$(dirname "$ROOT")"
  log=$(mktemp)
  if ! $SUDO debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" trixie "$ROOT.new" >"$log" 2>&1; then
    tail -30 "$log"
    echo "debian13: debootstrap failed"
    exit 1
  fi
  rm -f "$log"
  echo "$wanted" | $SUDO tee "$ROOT.new/.ember-root" >/dev/null
  $SUDO rm -rf "$ROOT"
  $SUDO mv "$ROOT.new" "$ROOT"
  echo "debian13: root made in $(( $(date +%s) - start ))s"
fi

bind() {  # bind <host path> <path in the root> [ro]
  $SUDO mkdir -p "$ROOT$2"
  $SUDO mount --bind "$1" "$ROOT$2"
  [ "${3:-}" != ro ] || $SUDO mount -o remount,bind,ro "$ROOT$2"
}
$SUDO mount -t proc proc "$ROOT/proc"
bind /dev /dev
bind "$PWD" /src ro
cuda=OFF
if [ -x /usr/local/cuda/bin/nvcc ]; then
  bind "$(readlink -f /usr/local/cuda)" /usr/local/cuda ro
  cuda=ON
fi
in_root() {
  $SUDO chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/cuda/bin:/usr/bin:/bin \
    CCACHE_DIR=/var/cache/ccache CCACHE_BASEDIR=/src CCACHE_MAXSIZE=8G bash -c "$1"
}
# (nvcc's host compiler by its full path, and as CUDAHOSTCXX, which CMake's check for a CUDA compiler reads: the
# root has no plain g++ for nvcc to fall back on.)
common="-DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=$cuda -DEMBER_CUDA_ARCHITECTURES=90-real -DEMBER_MPI=OFF"
in_root "rm -rf /build && mkdir -p /build"

# 1. GCC 14: configured here, then scripts/test-area.sh builds what the areas' tests run and runs them.
t0=$(date +%s)
echo "== debian13: GCC 14 ($(in_root 'g++-14 --version | head -1')): building and testing"
in_root "CUDAHOSTCXX=/usr/bin/g++-14 cmake -S /src -B /build/gcc14 $common -DEMBER_BENCH=OFF -DCMAKE_CXX_COMPILER=g++-14 \
  -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-14 >/build/gcc14-configure.log 2>&1" || { in_root "cat /build/gcc14-configure.log"; exit 1; }
if [ "$cuda" = ON ] && ! grep -q "CUDA backend ON" "$ROOT/build/gcc14-configure.log"; then
  cat "$ROOT/build/gcc14-configure.log"
  echo "debian13: nvcc is there but CMake did not take it (GCC 14 as its host compiler)"
  exit 1
fi
gcc14_status=0
in_root "cd /src && BUILD_DIR=/build/gcc14 bash scripts/test-area.sh '(core|autograd|nn|optim|imdb|cuda-emulated)'" \
  2>&1 | tee "$ROOT/build/gcc14-tests.log" || gcc14_status=1
gcc14_summary=$(grep -E "tests passed|tests failed" "$ROOT/build/gcc14-tests.log" | tail -n 1)
[ -n "$gcc14_summary" ] || { gcc14_summary="no ctest summary (the build failed?)"; gcc14_status=1; }
gcc14_result="GCC 14: $gcc14_summary ($(( $(date +%s) - t0 ))s)"
echo "debian13: $gcc14_result"

# 2. GCC 13: every target compiled and linked.
t0=$(date +%s)
echo "== debian13: GCC 13 ($(in_root 'g++-13 --version | head -1')): building every target"
gcc13_status=0
in_root "CUDAHOSTCXX=/usr/bin/g++-13 cmake -S /src -B /build/gcc13 $common -DCMAKE_CXX_FLAGS_RELEASE='-O0 -DNDEBUG' -DEMBER_TEST_OPT=-O0 -DEMBER_CUDA_EMULATOR=OFF \
  -DCMAKE_CXX_COMPILER=g++-13 -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-13 >/build/gcc13-configure.log 2>&1 && \
  cmake --build /build/gcc13 -j$JOBS >/build/gcc13-build.log 2>&1" || gcc13_status=1
if [ "$gcc13_status" = 0 ]; then
  fmt=$(in_root "sed -n 's/^EMBER_FMT_COMPILED_IN:BOOL=//p' /build/gcc13/CMakeCache.txt")
  gcc13_result="GCC 13: every target built but the emulator's (fmt compiled into Ember: $fmt) ($(( $(date +%s) - t0 ))s)"
else
  in_root "tail -40 /build/gcc13-build.log 2>/dev/null || cat /build/gcc13-configure.log"
  gcc13_result="GCC 13: FAILED to build (see above) ($(( $(date +%s) - t0 ))s)"
fi
echo "debian13: $gcc13_result"
backend="without the CUDA backend (no /usr/local/cuda/bin/nvcc)"
[ "$cuda" = OFF ] || backend="with the CUDA backend"
echo "debian13: $gcc14_result; $gcc13_result; $backend; $(( $(date +%s) - start ))s in all"
[ "$gcc14_status" = 0 ] && [ "$gcc13_status" = 0 ]
