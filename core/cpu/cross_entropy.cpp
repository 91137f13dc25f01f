// CPU cross-entropy kernels: per row, m = max, s = sum(e^(x - m)), loss = log(s) - (x[target] - m)
// (accumulated in double); backward e^(x - m) * (scale / s), with scale subtracted at the target.
// Row helpers from softmax.h.
#include "core/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu/rows.h"
#include "core/error.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

constexpr int64_t kRowsPerChunk = 64;      // rows per partial loss sum (fixed: determinism)
constexpr int64_t kGrainElements = 32768;  // about this many elements per parallel task

}  // namespace

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* t = targets.data<int64_t>();
  CrossEntropyForward out;
  out.row_max = Tensor::empty({N}, logits.dtype(), logits.device());
  out.sum_exp = Tensor::empty({N}, logits.dtype(), logits.device());
  for (int64_t r = 0; r < N; ++r) out.count += t[r] != ignore_index;
  const int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<double> partial(size_t(chunks), 0.0);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = logits.data<T>();
    T* maxes = out.row_max.data<T>();
    T* sums = out.sum_exp.data<T>();
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
        partial[size_t(c)] = total;
      }
    });
    double sum = 0;
    for (double p : partial) sum += p;
    out.loss = Tensor::empty({}, logits.dtype(), logits.device());
    *out.loss.data<T>() = out.count > 0 ? T(sum / double(out.count)) : T(0);
  });
  return out;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyForward& saved,
                              int64_t ignore_index, double scale) {
  const int64_t N = logits.size(0), C = logits.size(1);
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  const int64_t* t = targets.data<int64_t>();
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = logits.data<T>();
    const T* maxes = saved.row_max.data<T>();
    const T* sums = saved.sum_exp.data<T>();
    T* d = dx.data<T>();
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
  return dx;
}

}  // namespace ember::cpu
