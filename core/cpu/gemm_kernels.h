// GEMM internals shared by the driver (gemm.cpp) and the micro-kernel files (gemm_avx512.cpp, ...).
#pragma once
#include <cstdint>

namespace ember::cpu::detail {

// Packed layouts the micro-kernels read (both written by the driver's packing routines):
//   A micro-panel: mr rows x kc; element (r, k) at a_panel[k*mr + r]; rows past the matrix are 0.
//   B micro-panel: kc x width; element (k, j) at b_panel[k*width + j], where
//                  width = min(nr, round_up(n_cols, n_granule)); columns past the matrix are 0.
//
// A tile function computes one m_rows x n_cols block of C (m_rows <= mr, n_cols <= nr):
//   C[r, j] = alpha * sum_k a_panel(r, k) * b_panel(k, j) + beta * C[r, j]
// NOTE: beta == 0 means C is not read (it may hold NaN garbage).
template <typename T>
using TileFunction = void (*)(int64_t kc, const T* a_panel, const T* b_panel, T* c, int64_t c_rs,
                              int m_rows, int n_cols, T alpha, T beta);
// Optional: C[r, j] = bias[j] + sum_k a_panel(r, k) * b_panel(k, j) (alpha 1, C not read), the sums
// started from the bias so that a Linear layer's bias costs no pass over C.
template <typename T>
using BiasTileFunction = void (*)(int64_t kc, const T* a_panel, const T* b_panel, T* c, int64_t c_rs,
                                  int m_rows, int n_cols, const T* bias);

// Packing into those layouts: A block m x kc, B block kc x n, read through any strides
// (the pointers are at the block's first element). Portable versions: gemm_pack.h.
template <typename T>
using PackAFunction = void (*)(const T* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, T* out);
template <typename T>
using PackBFunction = void (*)(const T* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, T* out);

// A micro-kernel, its packing routines and the cache blocking that suits it.
template <typename T>
struct GemmKernel {
  const char* name;
  int mr;         // register tile rows
  int nr;         // register tile columns
  int n_granule;  // a partial B panel is padded to a multiple of this (the SIMD width)
  int64_t kc;     // K per packed pass (A and B micro-panels are kc long)
  int64_t mc;     // rows of A packed at once (a multiple of mr): the L2-resident block
  int64_t nc;     // columns of B packed at once (a multiple of nr)
  TileFunction<T> tile;
  PackAFunction<T> pack_a;
  PackBFunction<T> pack_b;
  BiasTileFunction<T> tile_bias = nullptr;  // null: the driver writes the bias into C first
};

// The x86 kernels are null when this CPU (or compiler) lacks the instructions.
const GemmKernel<float>* avx512_float_kernel();
const GemmKernel<double>* avx512_double_kernel();
const GemmKernel<float>* avx2_float_kernel();
// Portable C++ kernels: always available.
const GemmKernel<float>* generic_float_kernel();
const GemmKernel<double>* generic_double_kernel();

// NOTE: helpers in headers that kernel files include go in an unnamed namespace (one copy per
// file): an ordinary inline function compiled under gemm_avx512.cpp's AVX-512 target could be
// the copy the linker keeps for everyone, and fault on a CPU without AVX-512.
namespace {
constexpr int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}
}  // namespace

}  // namespace ember::cpu::detail
