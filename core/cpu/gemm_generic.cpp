// Portable GEMM micro-kernels in plain C++ (the compiler vectorizes them as far as its flags allow).
//
// Register tile kMR x kNR, accumulated in a local array; the packing pads edge panels with
// zeros, so the loops always run over the full tile and only the store is bounded.
#include <cstdint>

#include "core/cpu/gemm_kernels.h"
#include "core/cpu/gemm_pack.h"

namespace ember::cpu::detail {
namespace {

template <typename T, int kMR, int kNR>
void generic_tile(int64_t kc, const T* __restrict a, const T* __restrict b, T* c, int64_t c_rs,
                  int m_rows, int n_cols, T alpha, T beta) {
  T acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const T* a_column = a + k * kMR;
    const T* b_row = b + k * kNR;
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const T a_value = a_column[r];
#pragma GCC unroll 32
      for (int j = 0; j < kNR; ++j) acc[r][j] += a_value * b_row[j];
    }
  }
  for (int r = 0; r < m_rows; ++r) {
    T* row = c + r * c_rs;
    if (beta == T(0)) {
      for (int j = 0; j < n_cols; ++j) row[j] = alpha * acc[r][j];
    } else {
      for (int j = 0; j < n_cols; ++j) row[j] = alpha * acc[r][j] + beta * row[j];
    }
  }
}

// NOTE: n_granule == nr, so every B panel (even the last, partial one) is kNR wide.
const GemmKernel<float> kGenericFloat = {
    "generic", 4, 16, 16, 256, 128, 1024, &generic_tile<float, 4, 16>,
    &pack_a_generic<float, 4>, &pack_b_generic<float, 16, 16>};
const GemmKernel<double> kGenericDouble = {
    "generic", 4, 8, 8, 256, 128, 1024, &generic_tile<double, 4, 8>,
    &pack_a_generic<double, 4>, &pack_b_generic<double, 8, 8>};

}  // namespace

const GemmKernel<float>* generic_float_kernel() { return &kGenericFloat; }
const GemmKernel<double>* generic_double_kernel() { return &kGenericDouble; }

}  // namespace ember::cpu::detail
