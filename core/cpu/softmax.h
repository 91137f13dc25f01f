// CPU softmax / log-softmax kernels, forward and fused backward, over any dim; plus the row
// building blocks (max, sum of exponentials, a vectorisable float exp) that cross_entropy reuses.
//
// A tensor is seen as [outer, n, inner] with the softmax taken over n. inner == 1 (the last dim,
// contiguous) is the fast path: one row per task, every pass over a row a flat vectorisable loop.
// Otherwise blocks of columns are processed together, streaming rows of `inner` contiguous values.
// Each output element is computed by one thread in a fixed order: results never depend on the
// thread count.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/fast_math.h"
#include "core/tensor.h"

namespace ember::cpu {

// exp_vec (core/fast_math.h): a float e^x that vectorises; float64 uses std::exp.
using math::exp_vec;

// Row building blocks on contiguous rows (instantiated for float and double).
template <typename T> T row_max(const T* x, int64_t n);                 // -inf for n == 0; NaNs skipped
template <typename T> T row_sum_exp(const T* x, T shift, int64_t n);    // sum e^(x - shift)
// out = e^(x - shift) * scale
template <typename T> void row_exp_scaled(const T* x, T shift, T scale, T* out, int64_t n);
// out = e^(x - shift), returning the sum of the values written
template <typename T> T row_exp_store_sum(const T* x, T shift, T* out, int64_t n);
template <typename T> T row_dot(const T* a, const T* b, int64_t n);  // sum(a * b)
// Many short dot products: out[r out_rs] += alpha (a_r . b_r) for r < rows, a_r = a + r a_rs, b_r = b + r b_rs
// (b_rs 0: one b for every row). Sixteen rows at a time, their totals in one tree (lanes::lane_totals), so
// in another order than row_dot's; n < 16, and the rows past the last sixteen, are row_dot's own sums.
template <typename T>
void row_dots(int64_t rows, int64_t n, T alpha, const T* a, int64_t a_rs, const T* b, int64_t b_rs, T* out,
              int64_t out_rs);
template <typename T> T row_sum(const T* a, int64_t n);

// y = softmax(x) (or log_softmax when `log`) over `dim` (non-negative); x any layout, floating.
// Returns a new contiguous tensor of x's shape.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log, const char* op);
// The gradient of the input from the output gradient `grad` (any layout) and the saved output y
// (contiguous): softmax dx = y * (g - sum(g * y)); log_softmax dx = g - e^y * sum(g).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log, const char* op);

}  // namespace ember::cpu
