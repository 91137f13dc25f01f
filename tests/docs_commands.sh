#!/usr/bin/env bash
# Runs the commands a page of docs/ tells a contributor to run: every line of each ```bash block that
# follows a `<!-- ci: run these -->` line, in the build folder CI has just configured from a fresh
# clone (BUILD_DIR, which scripts/test-area.sh honours), so that a command the page shows cannot rot.
#   tests/docs_commands.sh BUILD_DIR docs/adding-an-op.md
# Prints each command and its last line; exits 1 if any command failed, 2 if the page has no such block.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$1 doc=$2
mapfile -t commands < <(awk '/<!-- ci: run these -->/ { armed = 1; next }
  armed && /^```bash/ { inside = 1; next }
  inside && /^```/ { inside = 0; armed = 0; next }
  inside && NF { print }' "$doc")
[ "${#commands[@]}" -gt 0 ] || { echo "docs_commands: $doc has no bash block after <!-- ci: run these -->"; exit 2; }
status=0
for command in "${commands[@]}"; do
  echo "== $doc: $command"
  if output=$(BUILD_DIR="$build" bash -c "$command" 2>&1); then
    echo "   ok: $(tail -n 1 <<<"$output")"
  else
    echo "$output" | tail -n 30
    echo "   FAILED: $command"
    status=1
  fi
done
exit "$status"
