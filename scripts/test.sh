#!/usr/bin/env bash
# Sets up, builds and runs every test. Ends with ctest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh "$BUILD_DIR"
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" --timeout 600
