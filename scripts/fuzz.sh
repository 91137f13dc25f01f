#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (+ ASan and UBSan) and runs each one for
# a given time, one after the other, starting from the seed corpus in tests/fuzz/corpus/<target>/.
#   scripts/fuzz.sh [seconds-per-target] [target ...]   (default: 60 s; all targets)
# Targets: safetensors reviews_json aclimdb tokenizer. Build and working corpora go to build-fuzz/
# (the seeds in the repository are never changed). A crash leaves its input in
# build-fuzz/artifacts/<target>/: copy it into tests/fuzz/regressions/<target>/ (the ctest tests
# fuzz_replay_<target> replay that folder) and fix the cause. Exits non-zero if any target crashed.
# Prints, per target, the executions libFuzzer reports (stat::number_of_executed_units).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(safetensors reviews_json aclimdb tokenizer)
OUT=${FUZZ_BUILD_DIR:-build-fuzz}

# clang and its libFuzzer/sanitizer runtimes come from Debian (clang-14 + libclang-rt-14-dev).
need=()
command -v clang++ >/dev/null || need+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
[ -f /usr/include/fmt/format.h ] || need+=(libfmt-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "fuzz: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

CXX=${FUZZ_CXX:-clang++}
FLAGS=(-std=c++20 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer)
declare -A SOURCES=(
  [safetensors]="core/safetensors.cpp core/file_io.cpp"
  [reviews_json]="examples/imdb/dataset.cpp examples/imdb/digest.cpp examples/imdb/vocabulary.cpp examples/imdb/tokenizer.cpp core/file_io.cpp"
  [aclimdb]="examples/imdb/dataset.cpp examples/imdb/digest.cpp core/file_io.cpp"
  [tokenizer]="examples/imdb/vocabulary.cpp examples/imdb/tokenizer.cpp examples/imdb/dataset.cpp examples/imdb/digest.cpp core/file_io.cpp"
)
mkdir -p "$OUT"
for t in "${TARGETS[@]}"; do
  [ -n "${SOURCES[$t]:-}" ] || { echo "fuzz: unknown target '$t'"; exit 2; }
  if [ ! -x "$OUT/fuzz_$t" ] || [ -n "$(find tests/fuzz core examples/imdb -newer "$OUT/fuzz_$t" -name '*.[ch]*' | head -1)" ]; then
    echo "fuzz: building fuzz_$t"
    # shellcheck disable=SC2086
    $CXX "${FLAGS[@]}" tests/fuzz/fuzz_$t.cpp ${SOURCES[$t]} -lfmt -lcrypto -o "$OUT/fuzz_$t"
  fi
done

status=0
summary=()
for t in "${TARGETS[@]}"; do
  corpus="$OUT/corpus/$t"
  artifacts="$OUT/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  log="$OUT/fuzz_$t.log"
  echo "fuzz: running fuzz_$t for ${SECONDS_PER_TARGET}s (log: $log)"
  rc=0
  # One process, no fork mode: one core stays free. -max_len 64 KiB covers every seed.
  "$OUT/fuzz_$t" "$corpus" tests/fuzz/regressions/"$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" -timeout=25 -rss_limit_mb=2048 >"$log" 2>&1 || rc=$?
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  if [ "$rc" -ne 0 ]; then
    status=1
    summary+=("fuzz_$t: CRASH (exit $rc) after ${execs:-?} executions; see $log and $artifacts/")
  else
    summary+=("fuzz_$t: ${SECONDS_PER_TARGET}s, ${execs:-?} executions, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l) inputs, no crash")
  fi
done
printf '%s\n' "${summary[@]}"
exit "$status"
