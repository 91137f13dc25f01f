// The CPU thread pool: parallel_for over an index range, with a user-settable thread count.
#pragma once
#include <cstdint>
#include <functional>

namespace ember {

// Number of threads CPU kernels use (default: the number of cores, or EMBER_NUM_THREADS).
int num_threads();
void set_num_threads(int n);

// The threads a parallel_for called here would use: 1 inside a pool worker, or on a caller running
// its own chunk (nested calls run inline), else num_threads(). A kernel that cuts its work for
// several threads asks this, so that inside a worker it does not cut it for nothing.
int threads_here();

// Runs fn(begin_i, end_i) over [begin, end) split into contiguous chunks of at least `grain`
// indices. The split depends only on (begin, end, grain, num_threads()), never on timing,
// so results are reproducible for a given thread count. Runs inline when the range is small
// or when called from inside a pool worker (no nested parallelism).
// NOTE: std::function holds a lambda of at most 16 trivially copyable bytes without allocating;
// on hot paths capture one reference ([&state]) rather than [&] naming many variables.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ember
