// AVX2/FMA GEMM micro-kernel (float), for x86 CPUs without AVX-512.
//
// Register tile 6 x 16 (two 8-float ymm vectors per row):
//
//            b_panel row k:  [ 8 floats | 8 floats ]     <- 2 vector loads
//   a_panel(0..5, k) broadcast, one row at a time:        12 ymm accumulators
//                            [ acc r,0  | acc r,1  ]      + 2 B vectors + 1 broadcast = 15 of 16
//
// Edge tiles are separate template instances; a partial last vector uses maskload/maskstore.
// NOTE: compiled for AVX2 through a target pragma; the selection function at the bottom is not.
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/gemm_pack.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>

// (clang has no push_options: its attribute pragma gives every function up to the pop the same target.)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace ember::cpu::detail {
namespace {

constexpr int kLanes = 8;
constexpr int kMR = 6;
constexpr int kNV = 2;

// Lanes [0, count) set: the mask maskload/maskstore take.
__m256i lane_mask(int count) {
  const __m256i lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane_index);
}

template <int kRows, int kVecs>
void tile(int64_t kc, const float* a, const float* b, float* c, int64_t c_rs, int n_cols,
          float alpha, float beta) {
  __m256 acc[kRows][kVecs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_setzero_ps();
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) _mm_prefetch(reinterpret_cast<const char*>(c + r * c_rs), _MM_HINT_T0);

#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b_row[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) b_row[v] = _mm256_loadu_ps(b + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      __m256 a_value = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_fmadd_ps(a_value, b_row[v], acc[r][v]);
    }
    a += kMR;
    b += kVecs * kLanes;
  }

  const __m256i last = lane_mask(n_cols - (kVecs - 1) * kLanes);
  const __m256i all = lane_mask(kLanes);
  const __m256 alpha_v = _mm256_set1_ps(alpha);
  const __m256 beta_v = _mm256_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    float* row = c + r * c_rs;
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      __m256i mask = v == kVecs - 1 ? last : all;
      __m256 out = _mm256_mul_ps(acc[r][v], alpha_v);
      if (beta != 0) out = _mm256_fmadd_ps(beta_v, _mm256_maskload_ps(row + v * kLanes, mask), out);
      _mm256_maskstore_ps(row + v * kLanes, mask, out);
    }
  }
}

using Tile = void (*)(int64_t, const float*, const float*, float*, int64_t, int, float, float);

template <int kRows, int... kVecsMinus1>
constexpr auto tile_row(std::integer_sequence<int, kVecsMinus1...>) {
  return std::array<Tile, sizeof...(kVecsMinus1)>{&tile<kRows, kVecsMinus1 + 1>...};
}
template <int... kRowsMinus1>
constexpr auto tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<Tile, kNV>, sizeof...(kRowsMinus1)>{
      tile_row<kRowsMinus1 + 1>(std::make_integer_sequence<int, kNV>{})...};
}

void tile_any_size(int64_t kc, const float* a, const float* b, float* c, int64_t c_rs, int m_rows,
                   int n_cols, float alpha, float beta) {
  static constexpr auto table = tile_table(std::make_integer_sequence<int, kMR>{});
  table[m_rows - 1][(n_cols + kLanes - 1) / kLanes - 1](kc, a, b, c, c_rs, n_cols, alpha, beta);
}

}  // namespace

const GemmKernel<float> kAvx2Float = {"avx2", kMR, kNV * kLanes, kLanes, 256, 96, 2048,
                                      &tile_any_size, &pack_a_generic<float, kMR>,
                                      &pack_b_generic<float, kNV * kLanes, kLanes>};

}  // namespace ember::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace ember::cpu::detail {

const GemmKernel<float>* avx2_float_kernel() {
  __builtin_cpu_init();
  bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported ? &kAvx2Float : nullptr;
}

}  // namespace ember::cpu::detail

#else  // not x86-64 GCC/Clang

namespace ember::cpu::detail {
const GemmKernel<float>* avx2_float_kernel() { return nullptr; }
}  // namespace ember::cpu::detail

#endif
