// The CPU's gradient clipping kernels (declared in core/kernels.h): the sum of the squares of every
// element of a list of tensors, the clipping factor from it, and the scaling of every tensor.
// Precision and determinism: each tensor's squares are summed in double in 16 independent lanes
// (element i into lane i % 16, the tail into lane 0), so that the loop vectorises; the lanes are that
// tensor's 16 partial sums, which the caller (or clip_scale) adds up in order. One thread, a fixed
// order: the same sum on every run. The scaling multiplies in the tensor's type, as Tensor::mul_
// does, each element on its own (the same result for any thread count).
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

constexpr int kLanes = 16;

// tensors.params[t][j] *= value for every tensor t, in T, on the thread pool.
template <typename T>
void scale_each(const TensorList& tensors, T value) {
  for (int t = 0; t < tensors.count; ++t) {
    T* p = static_cast<T*>(tensors.params[t]);
    parallel_for(0, tensors.sizes[t], 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) p[j] *= value;
    });
  }
}

}  // namespace

int64_t sum_squares_partials(const On&, const TensorList& tensors) { return int64_t(kLanes) * tensors.count; }

void sum_squares(const On& on, const TensorList& tensors, double* partials) {
  dispatch_floating(Dtype(on.dtype), "sum_of_squares", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int t = 0; t < tensors.count; ++t) {
      const T* d = static_cast<const T*>(tensors.grads[t]);
      const int64_t n = tensors.sizes[t];
      double lanes[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lanes[k] += double(d[i + k]) * double(d[i + k]);
      for (; i < n; ++i) lanes[0] += double(d[i]) * double(d[i]);
      for (int k = 0; k < kLanes; ++k) partials[t * kLanes + k] = lanes[k];
    }
  });
}

void scale_all(const On& on, const TensorList& tensors, double value) {
  dispatch_floating(Dtype(on.dtype), "scale_all_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_each<T>(tensors, T(value));
  });
}

void clip_scale(const On&, const double* partials, int64_t count, double max_norm, double* norm_scale) {
  double total = 0;
  for (int64_t c = 0; c < count; ++c) total += partials[c];
  const double norm = std::sqrt(total);
  norm_scale[0] = norm;
  norm_scale[1] = norm > max_norm && norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
}

void scale_all_by(const On& on, const TensorList& tensors, const double* factor) { scale_all(on, tensors, *factor); }

}  // namespace ember::cpu
