#!/usr/bin/env bash
# The training report in a real browser: a tiny real training run on the shipped small data
# writes report.html; `imdb report` rebuilds it; headless Chromium loads it, and the test
# asserts that the charts and one heat map per (review, layer, head) are in the rendered page
# (and the same for compare.html from a tiny `imdb compare` of h = 1 and 2),
# that the page logged nothing to the console (no errors), and saves a screenshot.
# Then, when given (the optional arguments), the same checks on a real run's report.html and compare.html.
# Usage: report_browser_test.sh <imdb binary> <imdb_small.json> <screenshot.png> [real report.html [real compare.html]]
# Exits 77 (ctest: skipped) when /usr/bin/chromium is not installed.
set -u
IMDB=$1 DATA=$2 SHOT=$3 REAL=${4:-} REAL_COMPARE=${5:-}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
  echo "skipped: $CHROMIUM is not installed (scripts/test.sh installs Debian's chromium)"
  exit 77
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Loads a page headless; the rendered DOM goes to $1.dom, Chromium's log (console messages) to $1.log.
browse() {
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --user-data-dir="$OUT/profile" --enable-logging=stderr --v=0 "${@:2}" >"$1.dom" 2>"$1.log"
}
console_messages() { grep -E ':CONSOLE[:(]' "$1.log"; }

# The harness checks itself first: a page with a script error must show up as a console message.
printf '<!DOCTYPE html><html><body><script>notDefinedAnywhere();</script></body></html>' >"$OUT/broken.html"
browse "$OUT/broken" --dump-dom "file://$OUT/broken.html"
console_messages "$OUT/broken" | grep -q "Uncaught ReferenceError" || fail "the console check does not see script errors"

# 2 layers x 2 heads on 4 reviews = 16 heat maps.
"$IMDB" train --data "$DATA" --dim 16 --heads 2 --layers 2 --ffn 32 --max-len 64 --batch-size 16 --epochs 2 \
  --quiet --out "$OUT/run" >/dev/null || fail "training failed"
[ -s "$OUT/run/report.html" ] || fail "train wrote no report.html"
mv "$OUT/run/report.html" "$OUT/from-train.html"
"$IMDB" report --run "$OUT/run" --data "$DATA" | grep -q "report.html" || fail "imdb report failed"
[ -s "$OUT/run/report.html" ] || fail "imdb report wrote no report.html"
cmp -s "$OUT/from-train.html" "$OUT/run/report.html" || fail "imdb report did not rebuild the same page as train"

page="file://$OUT/run/report.html"
browse "$OUT/page" --dump-dom "$page"
dom="$OUT/page.dom"
[ -s "$dom" ] || fail "chromium rendered nothing: $(tail -3 "$OUT/page.log")"
if console_messages "$OUT/page"; then fail "the page logged to the console (above)"; fi
# The page's own script counts what was drawn into <body data-*>: present only if it ran.
grep -q 'data-charts="3"' "$dom" || fail "expected 3 charts (loss, accuracy, throughput)"
grep -q 'data-heatmaps="16"' "$dom" || fail "expected 16 heat maps: $(grep -o 'data-heatmaps="[0-9]*"' "$dom")"
for id in loss-chart accuracy-chart throughput-chart; do
  grep -q "id=\"$id\"" "$dom" || fail "no $id"
done
grep -q '<polyline class="series"' "$dom" || fail "the charts have no lines"
for review in 0 1 2 3; do
  for layer in 0 1; do
    for head in 0 1; do
      grep -q "data-review=\"$review\" data-layer=\"$layer\" data-head=\"$head\"" "$dom" ||
        fail "no heat map for review $review layer $layer head $head"
    done
  done
done
grep -q 'class="tok"' "$dom" || fail "the heat maps have no token labels"

# The compare page: h = 1 and h = 2, 2 layers, 2 reviews -> 2 x 2 x (1 + 2) = 12 heat maps.
"$IMDB" compare --data "$DATA" --heads-list 1,2 --seeds 1 --dim 16 --layers 2 --ffn 32 --max-len 64 \
  --batch-size 16 --epochs 1 --quiet --out "$OUT/compare" >/dev/null 2>&1 || fail "imdb compare failed"
[ -s "$OUT/compare/compare.html" ] || fail "compare wrote no compare.html"
browse "$OUT/compare-page" --dump-dom "file://$OUT/compare/compare.html"
if console_messages "$OUT/compare-page"; then fail "the compare page logged to the console (above)"; fi
grep -q 'data-charts="2"' "$OUT/compare-page.dom" || fail "compare.html: expected 2 charts"
grep -q 'data-heatmaps="12"' "$OUT/compare-page.dom" || fail "compare.html: expected 12 heat maps"
for review in 0 1; do
  for layer in 0 1; do
    grep -q "data-review=\"$review\" data-layer=\"$layer\" data-head=\"0\" data-model-heads=\"1\"" "$OUT/compare-page.dom" ||
      fail "compare.html: no h = 1 map for review $review layer $layer"
    for head in 0 1; do
      grep -q "data-review=\"$review\" data-layer=\"$layer\" data-head=\"$head\" data-model-heads=\"2\"" "$OUT/compare-page.dom" ||
        fail "compare.html: no h = 2 map for review $review layer $layer head $head"
    done
  done
done

# The real run's page: 2 layers x 4 heads on 4 reviews = 32 heat maps.
if [ -n "$REAL" ]; then
  browse "$OUT/real" --dump-dom "file://$REAL"
  if console_messages "$OUT/real"; then fail "the real run's page logged to the console (above)"; fi
  grep -q 'data-charts="3"' "$OUT/real.dom" || fail "$REAL: expected 3 charts"
  grep -q 'data-heatmaps="32"' "$OUT/real.dom" || fail "$REAL: expected 32 heat maps"
  grep -q 'test accuracy after the last epoch 86.07%' "$OUT/real.dom" || fail "$REAL: not the 86.07% run"
fi
# The real compare page: h = 1, 4, 8, 2 layers, 2 reviews = 2 x 2 x 13 = 52 heat maps.
if [ -n "$REAL_COMPARE" ]; then
  browse "$OUT/real-compare" --dump-dom "file://$REAL_COMPARE"
  if console_messages "$OUT/real-compare"; then fail "the real compare page logged to the console (above)"; fi
  grep -q 'data-charts="2"' "$OUT/real-compare.dom" || fail "$REAL_COMPARE: expected 2 charts"
  grep -q 'data-heatmaps="52"' "$OUT/real-compare.dom" || fail "$REAL_COMPARE: expected 52 heat maps"
fi

browse "$OUT/shot" --screenshot="$SHOT" --window-size=1400,2400 --hide-scrollbars "$page"
[ "$(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "no PNG screenshot at $SHOT"
echo "ok: report.html (3 charts, 16 heat maps) and compare.html (2 charts, 12 heat maps)${REAL:+, the real h = 4 run page (3 charts, 32 heat maps)}${REAL_COMPARE:+, the real compare page (2 charts, 52 heat maps)} rendered in $($CHROMIUM --version 2>/dev/null), no console messages; screenshot $SHOT"
