#!/usr/bin/env bash
# Installs Ember from a build folder into a temporary prefix (cmake --install), then configures,
# builds and runs examples/consumer against that prefix alone, as a user's own project would.
#   tests/install_test.sh <build-dir> <source-dir> <the built libember.a>
set -euo pipefail
BUILD=$1 SOURCE=$2 LIBRARY=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$BUILD" --prefix "$TMP/prefix" >"$TMP/install.log" || { cat "$TMP/install.log"; fail "cmake --install"; }
for f in lib/libember.a lib/cmake/ember/ember-config.cmake include/ember/core/ops.h include/ember/nn/layers.h; do
  [ -f "$TMP/prefix/$f" ] || fail "the install has no $f"
done
cmp -s "$LIBRARY" "$TMP/prefix/lib/libember.a" || fail "the installed libember.a is not the one built in $BUILD"
# The consumer sees only the installed tree (not the sources): its compile lines name the prefix.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$SOURCE/examples/consumer" -B "$TMP/build" -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "${launcher[@]}" >"$TMP/configure.log" 2>&1 || { cat "$TMP/configure.log"; fail "configure"; }
if grep -q -- "-I$SOURCE" "$TMP/build/compile_commands.json"; then fail "the consumer compiles against the source tree"; fi
cmake --build "$TMP/build" >"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log"; fail "build"; }
"$TMP/build/consumer" || fail "the consumer program failed"
echo "installed into a temporary prefix; examples/consumer configured, built and ran against it"
