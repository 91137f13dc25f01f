#!/usr/bin/env bash
# The two ways a user's own project links Ember, each with examples/consumer configured, built and run:
#   1. installed: `cmake --install` into a temporary prefix, find_package(ember) with CMAKE_PREFIX_PATH
#      naming that prefix alone;
#   2. the build folder's package (CMake's export()): find_package(ember) with ember_DIR=<build-dir>.
# Either way the consumer names no library but ember::ember: in a CUDA build the package brings cudart
# (and cuDNN, NCCL, libdl) to the link itself. Also: what `cmake --install` leaves in the build folder
# (install_manifest.txt) lists the installed files and keeps the build folder's package working.
#   tests/install_test.sh <build-dir> <source-dir> <the built libember.a>
set -euo pipefail
BUILD=$1 SOURCE=$2 LIBRARY=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$BUILD" --prefix "$TMP/prefix" >"$TMP/install.log" || { cat "$TMP/install.log"; fail "cmake --install"; }
for f in lib/libember.a lib/cmake/ember/ember-config.cmake include/ember/autograd/ops.h include/ember/nn/layers.h; do
  [ -f "$TMP/prefix/$f" ] || fail "the install has no $f"
done
cmp -s "$LIBRARY" "$TMP/prefix/lib/libember.a" || fail "the installed libember.a is not the one built in $BUILD"
# The consumer sees only the installed tree (not the sources): its compile lines name the prefix.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$SOURCE/examples/consumer" -B "$TMP/build" -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "${launcher[@]}" >"$TMP/configure.log" 2>&1 || { cat "$TMP/configure.log"; fail "configure"; }
# (An imported target's include folders come as -isystem.)
against_sources() { grep -qE -- "-(I|isystem )$SOURCE[ \"]" "$1"; }
if against_sources "$TMP/build/compile_commands.json"; then fail "the consumer compiles against the source tree"; fi
cmake --build "$TMP/build" >"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log"; fail "build"; }
"$TMP/build/consumer" || fail "the consumer program failed"
echo "installed into a temporary prefix; examples/consumer configured, built and ran against it"

# CMake writes the list of installed files into the build folder, always: exactly the files under the prefix.
manifest="$BUILD/install_manifest.txt"
[ -f "$manifest" ] || fail "cmake --install wrote no $manifest"
if ! diff <(sort "$manifest") <(find "$TMP/prefix" -type f | sort) >"$TMP/manifest.diff"; then
  cat "$TMP/manifest.diff"
  fail "$manifest does not list exactly the installed files"
fi

# The build folder's package, with the install's manifest beside it: the same program, compiled
# against the sources and linked against this build's libember.a.
cmake -S "$SOURCE/examples/consumer" -B "$TMP/build-tree" -Dember_DIR="$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "${launcher[@]}" >"$TMP/configure-tree.log" 2>&1 ||
  { cat "$TMP/configure-tree.log"; fail "configure with ember_DIR=$BUILD"; }
against_sources "$TMP/build-tree/compile_commands.json" || fail "with ember_DIR the consumer does not compile against the sources"
if grep -q -- "$TMP/prefix" "$TMP/build-tree/compile_commands.json"; then fail "with ember_DIR the consumer uses the install"; fi
cmake --build "$TMP/build-tree" >"$TMP/build-tree.log" 2>&1 || { tail -30 "$TMP/build-tree.log"; fail "build with ember_DIR"; }
grep -q -- "$LIBRARY" "$TMP/build-tree/CMakeFiles/consumer.dir/link.txt" || fail "with ember_DIR the consumer does not link $LIBRARY"
"$TMP/build-tree/consumer" || fail "the consumer program built with ember_DIR=$BUILD failed"
echo "examples/consumer configured, built and ran against the build folder (ember_DIR=$BUILD)"

# A CUDA build: the CPU-only consumer linked cudart without naming it, brought by ember::ember.
if grep -q "CUDA::cudart" "$BUILD/ember-targets.cmake"; then
  for link in "$TMP/build/CMakeFiles/consumer.dir/link.txt" "$TMP/build-tree/CMakeFiles/consumer.dir/link.txt"; do
    grep -q "libcudart" "$link" || fail "a CUDA build's package did not bring cudart to the link ($link)"
  done
  echo "a CUDA build: the package brought cudart to both links"
fi
