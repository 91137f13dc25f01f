// CPU softmax / log-softmax kernels, forward and fused backward, over any dim; plus the row
// building blocks (max, sum of exponentials, a vectorisable float exp) that cross_entropy reuses.
//
// A tensor is seen as [outer, n, inner] with the softmax taken over n. inner == 1 (the last dim,
// contiguous) is the fast path: one row per task, every pass over a row a flat vectorisable loop.
// Otherwise blocks of columns are processed together, streaming rows of `inner` contiguous values.
// Each output element is computed by one thread in a fixed order: results never depend on the
// thread count.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/tensor.h"

namespace ember::cpu {

// e^x in float without calls or branches, so that loops over it vectorise. Cody-Waite reduction
// x = k ln2 + r with |r| <= ln2/2, a degree-7 Taylor polynomial for e^r (truncation < 1e-8 relative),
// then 2^k applied as two factors so that results from subnormal to overflow are right.
// NaN -> NaN, -inf -> 0, +inf -> inf. Max relative error about 1 float ulp (tested against std::exp).
inline float exp_vec(float x) {
  float xc = x < -110.0f ? -110.0f : (x > 90.0f ? 90.0f : x);  // NaN passes through unchanged
  constexpr float kShifter = 12582912.0f;                      // 1.5 * 2^23: adding it rounds to an integer
  float t = xc * 1.44269504088896341f + kShifter;
  int32_t k = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShifter);
  float kf = t - kShifter;
  float r = xc - kf * 0.693359375f;   // ln2 split: the high part has few bits, so kf * hi is exact
  r = r - kf * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t k1 = k >> 1, k2 = k - k1;  // k in [-159, 130]: both halves are normal exponents
  float s1 = std::bit_cast<float>((k1 + 127) << 23);
  float s2 = std::bit_cast<float>((k2 + 127) << 23);
  return p * s1 * s2;
}
// float64 keeps the library exp (precision first: gradchecks run in float64).
inline double exp_vec(double x) { return std::exp(x); }

// Row building blocks on contiguous rows (instantiated for float and double).
template <typename T> T row_max(const T* x, int64_t n);                 // -inf for n == 0; NaNs skipped
template <typename T> T row_sum_exp(const T* x, T shift, int64_t n);    // sum e^(x - shift)
// out = e^(x - shift) * scale
template <typename T> void row_exp_scaled(const T* x, T shift, T scale, T* out, int64_t n);

// y = softmax(x) (or log_softmax when `log`) over `dim` (non-negative); x any layout, floating.
// Returns a new contiguous tensor of x's shape.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log, const char* op);
// The gradient of the input from the output gradient `grad` (any layout) and the saved output y
// (contiguous): softmax dx = y * (g - sum(g * y)); log_softmax dx = g - e^y * sum(g).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log, const char* op);

}  // namespace ember::cpu
