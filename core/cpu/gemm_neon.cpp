// NEON GEMM micro-kernel (float) for 64-bit ARM (aarch64), where NEON is part of the base instruction set:
// no run-time check is needed, and elsewhere the kernel is null.
//
// Register tile 8 x 12 (three 4-float q registers per row):
//
//            b_panel row k:  [ 4 floats | 4 floats | 4 floats ]     <- 3 vector loads
//   a_panel(0..7, k):        two vector loads (rows 0-3, 4-7)       24 accumulators
//   row r:                   [ acc r,0  | acc r,1  | acc r,2  ]     + 3 B + 2 A = 29 of 32 registers
//
// Each k step: 5 loads, 24 FMAs by lane (fmla v.4s, v.4s, v.s[r]: A's value is taken from its lane, no
// broadcast instruction). The packed A panel always holds 8 rows (rows past the matrix are 0), so every
// tile runs all 8 and stores m_rows; a partial B panel (n_cols not a multiple of 12) runs only the
// vectors it has (n_granule 4), the last one stored lane by lane when n_cols is not a multiple of 4.
// float64 keeps the generic kernel (its products are the gradient checks', not the training's).
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/gemm_pack.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#include <cstdint>

namespace ember::cpu::detail {
namespace {

constexpr int kLanes = 4;
constexpr int kMR = 8;
constexpr int kNV = 3;

template <int kVecs>
void tile(int64_t kc, const float* a, const float* b, float* c, int64_t c_rs, int m_rows, int n_cols, float alpha,
          float beta) {
  float32x4_t acc[kMR][kVecs];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  }
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    float32x4_t b_row[kVecs];
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v) b_row[v] = vld1q_f32(b + v * kLanes);
    const float32x4_t a_low = vld1q_f32(a), a_high = vld1q_f32(a + kLanes);
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v) {
      acc[0][v] = vfmaq_laneq_f32(acc[0][v], b_row[v], a_low, 0);
      acc[1][v] = vfmaq_laneq_f32(acc[1][v], b_row[v], a_low, 1);
      acc[2][v] = vfmaq_laneq_f32(acc[2][v], b_row[v], a_low, 2);
      acc[3][v] = vfmaq_laneq_f32(acc[3][v], b_row[v], a_low, 3);
      acc[4][v] = vfmaq_laneq_f32(acc[4][v], b_row[v], a_high, 0);
      acc[5][v] = vfmaq_laneq_f32(acc[5][v], b_row[v], a_high, 1);
      acc[6][v] = vfmaq_laneq_f32(acc[6][v], b_row[v], a_high, 2);
      acc[7][v] = vfmaq_laneq_f32(acc[7][v], b_row[v], a_high, 3);
    }
    a += kMR;
    b += kVecs * kLanes;
  }

  const int last_lanes = n_cols - (kVecs - 1) * kLanes;  // 1 to 4
  for (int r = 0; r < m_rows; ++r) {
    float* row = c + r * c_rs;
#pragma GCC unroll 3
    for (int v = 0; v < kVecs; ++v) {
      float32x4_t out = vmulq_n_f32(acc[r][v], alpha);
      float* at = row + v * kLanes;
      if (v < kVecs - 1 || last_lanes == kLanes) {
        if (beta != 0) out = vfmaq_n_f32(out, vld1q_f32(at), beta);  // beta 0: C is not read (it may be NaN)
        vst1q_f32(at, out);
      } else {
        float lanes[kLanes];
        vst1q_f32(lanes, out);
        for (int j = 0; j < last_lanes; ++j) at[j] = beta != 0 ? lanes[j] + beta * at[j] : lanes[j];
      }
    }
  }
}

void tile_any_size(int64_t kc, const float* a, const float* b, float* c, int64_t c_rs, int m_rows, int n_cols,
                   float alpha, float beta) {
  using Tile = void (*)(int64_t, const float*, const float*, float*, int64_t, int, int, float, float);
  static constexpr Tile by_vectors[kNV] = {&tile<1>, &tile<2>, &tile<3>};
  by_vectors[(n_cols + kLanes - 1) / kLanes - 1](kc, a, b, c, c_rs, m_rows, n_cols, alpha, beta);
}

// Blocking as the AVX2 kernel's (kc 256: an A panel of 8 KiB and a B panel of 12 KiB stay in L1).
const GemmKernel<float> kNeonFloat = {"neon", kMR, kNV * kLanes, kLanes, 256, 96, 2040,
                                      &tile_any_size, &pack_a_generic<float, kMR>,
                                      &pack_b_generic<float, kNV * kLanes, kLanes>};

}  // namespace

const GemmKernel<float>* neon_float_kernel() { return &kNeonFloat; }

}  // namespace ember::cpu::detail

#else  // not aarch64

namespace ember::cpu::detail {
const GemmKernel<float>* neon_float_kernel() { return nullptr; }
}  // namespace ember::cpu::detail

#endif
