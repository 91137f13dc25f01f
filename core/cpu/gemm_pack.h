// Portable GEMM packing routines (any strides), included by each kernel file so they compile for its ISA.
//
// Layouts (see gemm_kernels.h):
//   A block m x kc  -> ceil(m / kMR) micro-panels; panel p element (r, k) at [p*kMR*kc + k*kMR + r]
//   B block kc x n  -> ceil(n / kNR) micro-panels; panel q is width(q) = min(kNR, round_up(cols, kGranule))
//                      wide, element (k, j) at [q*kNR*kc + k*width(q) + j]
// Rows/columns past the matrix are written as zeros.
// Convert: what is stored for a source value: the value itself (Same), or the float of its bfloat16 rounding
// (RoundedToBf16: the bfloat16 GEMM's "rounded" kernels, gemm_bf16_rounded.cpp).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/bfloat16.h"
#include "core/cpu/gemm_kernels.h"

namespace ember::cpu::detail {
// NOTE: unnamed namespace, so each kernel file gets its own copy compiled for its own ISA
// (see the note in gemm_kernels.h).
namespace {

struct Same {
  template <typename T> T operator()(T x) const { return x; }
};
struct RoundedToBf16 {  // round to nearest even, NaN kept (BFloat16's rule); a bfloat16 source is exact
  float operator()(float x) const { return BFloat16::to_float(BFloat16::round_to_bits(x)); }
  float operator()(BFloat16 x) const { return float(x); }
};

template <typename T, int kMR, typename P = T, typename Convert = Same>
void pack_a_generic(const T* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, P* out) {
  const Convert convert;
  if (a_rs == 1) {  // column-major A: read each k's run of all m rows once, front to back
    for (int64_t k = 0; k < kc; ++k) {
      const T* column = A + k * a_cs;
      for (int64_t i0 = 0; i0 < m; i0 += kMR) {
        const int rows = static_cast<int>(std::min<int64_t>(kMR, m - i0));
        P* dst = out + i0 * kc + k * kMR;
        for (int r = 0; r < rows; ++r) dst[r] = convert(column[i0 + r]);
        for (int r = rows; r < kMR; ++r) dst[r] = P(0);
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < m; i0 += kMR) {  // otherwise walk each row, scatter with stride kMR
    const int rows = static_cast<int>(std::min<int64_t>(kMR, m - i0));
    for (int r = 0; r < rows; ++r) {
      const T* row = A + (i0 + r) * a_rs;
      P* dst = out + r;
      if (a_cs == 1) {
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR] = convert(row[k]);
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR] = convert(row[k * a_cs]);
      }
    }
    for (int r = rows; r < kMR; ++r) {
      for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = P(0);
    }
    out += kMR * kc;
  }
}

template <typename T, int kNR, int kGranule, typename P = T, typename Convert = Same>
void pack_b_generic(const T* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, P* out) {
  const Convert convert;
  for (int64_t j0 = 0; j0 < n; j0 += kNR) {
    const int cols = static_cast<int>(std::min<int64_t>(kNR, n - j0));
    const int width = static_cast<int>(std::min<int64_t>(kNR, round_up(cols, kGranule)));
    const T* src = B + j0 * b_cs;
    if (b_cs == 1) {  // row-major B: each k is a contiguous run of columns
      for (int64_t k = 0; k < kc; ++k) {
        const T* row = src + k * b_rs;
        P* dst = out + k * width;
        for (int j = 0; j < cols; ++j) dst[j] = convert(row[j]);
        for (int j = cols; j < width; ++j) dst[j] = P(0);
      }
    } else {  // walk each column contiguously, scatter with stride width
      for (int j = 0; j < cols; ++j) {
        const T* column = src + j * b_cs;
        P* dst = out + j;
        if (b_rs == 1) {
          for (int64_t k = 0; k < kc; ++k) dst[k * width] = convert(column[k]);
        } else {
          for (int64_t k = 0; k < kc; ++k) dst[k * width] = convert(column[k * b_rs]);
        }
      }
      for (int j = cols; j < width; ++j) {
        for (int64_t k = 0; k < kc; ++k) out[k * width + j] = P(0);
      }
    }
    out += kNR * kc;
  }
}

}  // namespace
}  // namespace ember::cpu::detail
