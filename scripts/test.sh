#!/usr/bin/env bash
# Sets up, builds and runs every test. Ends with ctest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh "$BUILD_DIR"
# The training report's browser test (tests/report_browser_test.sh) loads the page in Debian's
# headless Chromium; without it that one test is skipped.
if [ ! -x /usr/bin/chromium ]; then
  echo "test: installing chromium"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
cd "$BUILD_DIR"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
ctest --output-on-failure -j"$(nproc)" --timeout 600 2>&1 | tee "$log" || status=$?
# ctest lists skipped tests (no GPU) after its summary: repeat the summary as the last line.
grep -E "tests passed|tests failed" "$log" | tail -n 1
exit "$status"
