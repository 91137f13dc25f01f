// The CPU's cross-entropy kernels (declared in core/kernels.h): fused log-softmax + negative
// log-likelihood over rows of [N, C] logits. Per row, m = max, s = sum(e^(x - m)), loss =
// log(s) - (x[target] - m) (accumulated in double); backward e^(x - m) * (scale / s), with scale
// subtracted at the target, scale = grad / count. Row helpers from core/cpu/rows.h.
// Determinism: the loss sum is taken per fixed chunk of kRowsPerChunk rows in double (the scratch)
// and the chunks added in order: the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cpu/rows.h"
#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

constexpr int64_t kRowsPerChunk = 64;      // rows per partial loss sum (fixed: determinism)
constexpr int64_t kGrainElements = 32768;  // about this many elements per parallel task

}  // namespace

// One partial loss sum per chunk of rows.
int64_t cross_entropy_scratch(const On&, int64_t N) { return (N + kRowsPerChunk - 1) / kRowsPerChunk; }

void cross_entropy_forward(const On& on, const void* logits, const int64_t* t, int64_t N, int64_t C,
                           int64_t ignore_index, int64_t count, void* row_maxes, void* row_sums, void* loss,
                           double* partial) {
  const int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  dispatch_floating(Dtype(on.dtype), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(logits);
    T* maxes = static_cast<T*>(row_maxes);
    T* sums = static_cast<T*>(row_sums);
    int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(kRowsPerChunk * C, 1));
    parallel_for(0, chunks, grain, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        double total = 0;
        for (int64_t r = c * kRowsPerChunk; r < std::min(N, (c + 1) * kRowsPerChunk); ++r) {
          if (t[r] == ignore_index) {
            maxes[r] = T(0);
            sums[r] = T(1);
            continue;
          }
          const T* row = x + r * C;
          const T m = row_max(row, C);
          const T s = row_sum_exp(row, m, C);
          maxes[r] = m;
          sums[r] = s;
          total += std::log(double(s)) - (double(row[t[r]]) - double(m));
        }
        partial[c] = total;
      }
    });
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c];
    *static_cast<T*>(loss) = count > 0 ? T(sum / double(count)) : T(0);
  });
}

void cross_entropy_backward(const On& on, const void* logits, const int64_t* t, const void* row_maxes,
                            const void* row_sums, void* dlogits, int64_t N, int64_t C, int64_t ignore_index,
                            const double* grad, int64_t count) {
  const double scale = count > 0 ? grad[0] / double(count) : 0.0;
  dispatch_floating(Dtype(on.dtype), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(logits);
    const T* maxes = static_cast<const T*>(row_maxes);
    const T* sums = static_cast<const T*>(row_sums);
    T* d = static_cast<T*>(dlogits);
    const T s = T(scale);
    parallel_for(0, N, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* out = d + r * C;
        if (t[r] == ignore_index) {
          std::fill(out, out + C, T(0));
          continue;
        }
        row_exp_scaled(x + r * C, maxes[r], T(s / sums[r]), out, C);
        out[t[r]] -= s;
      }
    });
  });
}

}  // namespace ember::cpu
