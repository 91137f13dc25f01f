// Row building blocks: reductions and maps over one contiguous row (max, sums, exponentials, dot
// products), vectorised in 16 lanes (core/cpu/lanes.h). Softmax, cross-entropy, the attention kernels and
// the thin GEMMs are written with them. Instantiated for float and double.
#pragma once
#include <cstdint>

#include "core/fast_math.h"

namespace ember::cpu {

// exp_vec (core/fast_math.h): a float e^x that vectorises; float64 uses std::exp.
using math::exp_vec;

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

}  // namespace ember::cpu
