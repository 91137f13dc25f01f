#!/usr/bin/env bash
# Sets up, builds the trainer (only it: not the tests, the emulator, the benchmarks or the examples),
# downloads IMDb (first run only) and trains the multi-head classifier with the reference recipe.
# Extra arguments go to `imdb train` (e.g. --heads 1, --limit 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm >/dev/null
fi
bash scripts/setup.sh build imdb
exec build/imdb train "$@"
