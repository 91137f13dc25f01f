#!/usr/bin/env bash
# The fast test loop: builds only what one area's tests run and runs them (ctest -L <area>), the
# slow ones left out unless the area is slow. scripts/test.sh is the full gate (CI).
#   scripts/test-area.sh <area> [ctest arguments...]      e.g. scripts/test-area.sh core -R matmul
# Areas (ctest labels, CMakeLists.txt): core autograd nn optim imdb cuda-emulated distributed docs
# examples install slow. EMBER_SLOW=1 keeps the slow tests of the area too.
# Which programs to build is read from ctest itself: every build-folder program that a test of the
# area runs (a test program not built yet stands in with its <name>_NOT_BUILT test).
# It builds in build-fast/ (BUILD_DIR), without the CUDA backend: the CUDA libraries cost a test
# process about 0.8 s of CPU to load (cuBLAS's initialisation), against 0.05 s without them. The
# CUDA code still runs there, on the emulator (area cuda-emulated). On a GPU machine:
# BUILD_DIR=build scripts/test-area.sh cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-fast}
area=${1:-}
if [ -z "$area" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
shift
if [ ! -f "$BUILD_DIR/CTestTestfile.cmake" ]; then
  bash scripts/setup.sh --deps-only
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=OFF ${EMBER_CMAKE_ARGS:-} >/dev/null
fi
select=(-L "^${area}\$")
[ "$area" = slow ] || [ "${EMBER_SLOW:-0}" = 1 ] || select+=(-LE "^slow\$")

# The programs the selected tests run: ctest's JSON list of them, every argument that is a target's
# output in the build folder (or a <target>_NOT_BUILT stand-in).
targets_of_tests() {
  ctest --test-dir "$BUILD_DIR" "${select[@]}" --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, re, sys
build, known = os.path.realpath(sys.argv[1]), set(sys.argv[2].split())
# ctest gives no command for a test whose program does not exist yet: CTestTestfile.cmake has it.
added = {}
for line in open(os.path.join(build, "CTestTestfile.cmake")):
    m = re.match(r"add_test\(\[=*\[(.*?)\]=*\] (.*)\)$", line.strip())
    if m:
        added[m.group(1)] = re.findall(r"\"([^\"]*)\"", m.group(2))
wanted = set()
for test in json.load(sys.stdin).get("tests", []):
    name = test["name"]
    args = test.get("command") or added.get(name, [])
    if name.endswith("_NOT_BUILT"):
        args = args + [name]
    for arg in args:
        target = os.path.basename(arg)
        target = target[:-len("_NOT_BUILT")] if target.endswith("_NOT_BUILT") else target
        if target.startswith("lib") and target.endswith(".a"):
            target = target[3:-2]
        if target in known and (os.path.realpath(arg).startswith(build + "/") or arg.endswith("_NOT_BUILT")):
            wanted.add(target)
print(" ".join(sorted(wanted)))
' "$BUILD_DIR" "$(sed -n 's|.*/CMakeFiles/\(.*\)\.dir$|\1|p' "$BUILD_DIR/CMakeFiles/TargetDirectories.txt" | tr '\n' ' ')"
}

start=$(date +%s)
targets=$(targets_of_tests)
if [ -n "$targets" ]; then
  echo "test-area: building $targets"
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j"$(nproc)" $(printf -- '--target %s ' $targets) >"$BUILD_DIR/test-area-build.log" 2>&1 ||
    { tail -40 "$BUILD_DIR/test-area-build.log"; exit 1; }
  more=$(targets_of_tests)  # a test program just built lists its tests, which may run other programs
  if [ "$more" != "$targets" ]; then
    # shellcheck disable=SC2086
    cmake --build "$BUILD_DIR" -j"$(nproc)" $(printf -- '--target %s ' $more) >>"$BUILD_DIR/test-area-build.log" 2>&1 ||
      { tail -40 "$BUILD_DIR/test-area-build.log"; exit 1; }
  fi
fi
built=$(date +%s)
status=0
ctest --test-dir "$BUILD_DIR" "${select[@]}" -j"$(nproc)" --output-on-failure "$@" || status=$?
echo "test-area $area: built in $((built - start)) s, tests ran in $(( $(date +%s) - built )) s"
exit "$status"
