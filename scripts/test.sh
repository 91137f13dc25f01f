#!/usr/bin/env bash
# Sets up, builds and runs every test, in two configurations:
#   1. sanitizers: AddressSanitizer + UndefinedBehaviorSanitizer (CPU only, -O1 -g1 and the test files
#      at -O0: the build is most of CI's time; no benchmarks,
#      no CUDA emulator: its fibers switch stacks behind ASan's back) in build-asan/ (skip with
#      EMBER_SANITIZE_CI=0), built with clang 16 and its standard library, libc++, strict about
#      transitive includes (_LIBCPP_REMOVE_TRANSITIVE_INCLUDES): the second toolchain CI builds and
#      tests with, at no extra build;
#   2. the normal Release build in build/ (GCC), with the CUDA tests also run on the CPU emulator
#      ("emulated: ..." tests, docs/cuda.md).
# Between them, scripts/tsan.sh runs the threaded tests under ThreadSanitizer (build-tsan/, GCC; skip
# with EMBER_TSAN_CI=0); a data race fails the run. Then two other machines:
#   - scripts/debian13.sh: Debian 13 in a debootstrap root (kept in /var/cache/ember), GCC 14 building the
#     library, the CUDA backend and the tests and running the core, autograd, nn, optim, imdb and
#     cuda-emulated areas, GCC 13 building every target (skip with EMBER_DEBIAN13_CI=0);
#   - scripts/arm64.sh: the aarch64 cross build (build-arm64/), the core, autograd and nn areas run under
#     qemu-aarch64 (skip with EMBER_ARM64_CI=0).
# A failure in either fails the run. After them, the commands docs/adding-an-op.md gives a contributor run
# as written, in build/ (tests/docs_commands.sh).
# Each configuration's ctest summary is printed; the last line is the ctest-style summary of the
# whole run (both configurations), and the exit code is non-zero if any test failed in either.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ASAN_DIR=${ASAN_DIR:-build-asan}
JOBS=$(nproc)
bash scripts/setup.sh "$BUILD_DIR"
# The training report's browser test (tests/report_browser_test.sh) loads the page in Debian's
# headless Chromium; without it that one test is skipped.
if [ ! -x /usr/bin/chromium ]; then
  echo "test: installing chromium"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# The sanitizer build's toolchain: clang 16, libc++ (with libc++abi) and clang's sanitizer runtimes.
clang_packages=(clang-16 libc++-16-dev libc++abi-16-dev libclang-rt-16-dev)
if [ "${EMBER_SANITIZE_CI:-1}" != 0 ] && ! dpkg -s "${clang_packages[@]}" >/dev/null 2>&1; then
  echo "test: installing ${clang_packages[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${clang_packages[@]}" >/dev/null
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
summary() { grep -E "tests passed|tests failed" "$1" | tail -n 1; }
status=0

if [ "${EMBER_SANITIZE_CI:-1}" != 0 ]; then
  start=$(date +%s)
  echo "== sanitizer configuration (ASan + UBSan, clang 16 + libc++): building $ASAN_DIR"
  cmake -S . -B "$ASAN_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_CXX_FLAGS="-stdlib=libc++ -D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES" \
    -DEMBER_TEST_OPT=-O0 -DEMBER_SANITIZE=ON -DEMBER_BENCH=OFF -DEMBER_CUDA=OFF -DEMBER_CUDA_EMULATOR=OFF >/dev/null
  cmake --build "$ASAN_DIR" -j"$JOBS" >"$logs/asan-build.log" 2>&1 || { tail -50 "$logs/asan-build.log"; exit 1; }
  built=$(date +%s)
  # allocator_may_return_null: the out-of-memory test asks for 16 TiB and expects an ember::Error.
  (cd "$ASAN_DIR" && ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1:strict_string_checks=1" \
     UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
     ctest --output-on-failure -j"$JOBS" --timeout 900) 2>&1 | tee "$logs/asan.log" || status=$?
  echo "== sanitizer configuration: built in $((built - start))s, tests ran in $(( $(date +%s) - built ))s"
fi

tsan_result=""
if [ "${EMBER_TSAN_CI:-1}" != 0 ]; then
  echo "== ThreadSanitizer (scripts/tsan.sh)"
  start=$(date +%s)
  if bash scripts/tsan.sh >"$logs/tsan.log" 2>&1; then
    tsan_result="$(tail -n 1 "$logs/tsan.log"); with its build: $(( $(date +%s) - start ))s"
  else
    tail -60 "$logs/tsan.log"
    tsan_result="tsan: FAILED (a data race or a failed test; see above)"
    status=1
  fi
  echo "$tsan_result"
fi

# Another distribution and another CPU: each script's last line is its result.
other_stage() {  # other_stage <name> <skip variable's value> <script>
  local name=$1 enabled=$2 script=$3 start result
  [ "$enabled" != 0 ] || return 0
  echo "== $name ($script)"
  start=$(date +%s)
  if bash "$script" >"$logs/$name.log" 2>&1; then
    result="$name: $(grep -E "tests passed|tests failed" "$logs/$name.log" | tail -n 1); $(( $(date +%s) - start ))s with its build"
  else
    tail -80 "$logs/$name.log"
    result="$name: FAILED (see above); $(( $(date +%s) - start ))s"
    status=1
  fi
  [ "$name" != debian13 ] || result+=" ($(tail -n 1 "$logs/$name.log" | sed 's/^debian13: //'))"
  echo "$result"
  other_results+=("$result")
}
other_results=()
other_stage debian13 "${EMBER_DEBIAN13_CI:-1}" scripts/debian13.sh
other_stage arm64 "${EMBER_ARM64_CI:-1}" scripts/arm64.sh

echo "== normal configuration (Release)"
(cd "$BUILD_DIR" && ctest --output-on-failure -j"$JOBS" --timeout 600) 2>&1 | tee "$logs/normal.log" || status=$?

echo "== the commands docs/adding-an-op.md gives a contributor, run in $BUILD_DIR (configured above)"
if bash tests/docs_commands.sh "$BUILD_DIR" docs/adding-an-op.md >"$logs/docs-commands.log" 2>&1; then
  docs_result="docs commands: passed ($(grep -c '^   ok' "$logs/docs-commands.log") of docs/adding-an-op.md)"
else
  cat "$logs/docs-commands.log"
  docs_result="docs commands: FAILED (see above)"
  status=1
fi
echo "$docs_result"

# ctest lists skipped tests (no GPU) after its summary: repeat the summaries, and end with the total.
total=0 failed=0
for config in asan debian13 arm64 normal; do
  [ -f "$logs/$config.log" ] || continue
  line=$(summary "$logs/$config.log")
  echo "$config: ${line:-no ctest summary (ctest did not run)}"
  [ -n "$line" ] || { status=1; continue; }
  n=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  f=$(sed -E 's/.*tests passed, ([0-9]+) tests failed.*/\1/' <<<"$line")
  total=$((total + n)) failed=$((failed + f))
done
[ -z "$tsan_result" ] || echo "$tsan_result"
for result in "${other_results[@]}"; do echo "$result"; done
echo "$docs_result"
[ "$failed" -eq 0 ] || status=1
percent=$(( total > 0 ? (total - failed) * 100 / total : 0 ))
echo "${percent}% tests passed, ${failed} tests failed out of ${total}"
exit "$status"
