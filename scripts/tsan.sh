#!/usr/bin/env bash
# ThreadSanitizer run over the multithreaded parts: the thread pool (parallel_for), the GEMM and
# matmul (split over threads), the kernels that reduce per chunk, the data loading and batching,
# and whole training runs on 1-3 threads (determinism, resume). Builds only the test program,
# into build-tsan/ (g++ -fsanitize=thread, -O1 -g, no CUDA). Any data race fails the run.
#   scripts/tsan.sh            (not part of .ci/run: see docs/reliability.md for why and its time)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-tsan}
JOBS=${JOBS:-$(nproc)}
bash scripts/setup.sh --deps-only
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DEMBER_TSAN=ON -DEMBER_BENCH=OFF -DEMBER_CUDA=OFF >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target ember_tests
filter="parallel_for*,gemm*,matmul*,layer_norm*,softmax*,cross_entropy*,reduce*,sum*,embedding*,dropout*"
filter+=",dataset*,batcher*,vocabulary*,determinism*,train: resuming*"
# halt_on_error: the first race fails the run; second_deadlock_stack for readable reports.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export EMBER_CTEST_SKIP=1
start=$(date +%s)
"$BUILD_DIR"/ember_tests -tc="$filter" --no-intro=true
echo "tsan: no data race in the selected tests ($(( $(date +%s) - start ))s)"
