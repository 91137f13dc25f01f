// AVX-512 GEMM micro-kernels (float and double): an MR x (NV vectors) register tile of FMAs.
//
// Register tile (float, MR = 14, NV = 2, so 14 x 32):
//
//            b_panel row k:  [ 16 floats | 16 floats ]      <- 2 vector loads
//   a_panel(0,k)  broadcast  [  acc 0,0  |  acc 0,1  ]
//   a_panel(1,k)  broadcast  [  acc 1,0  |  acc 1,1  ]      28 zmm accumulators
//      ...                          ...                      + 2 B vectors + 1 broadcast = 31 of 32
//   a_panel(13,k) broadcast  [ acc 13,0  | acc 13,1  ]
//
// Each k step: 2 loads of B, 14 broadcasts of A, 28 FMAs. Vectors run along N, so a C tile
// row is NV contiguous vectors and needs no transposition. Edge tiles (fewer rows, fewer
// vectors, a partial last vector) are separate template instances with masked C access.
//
// NOTE: this file is compiled for AVX-512 through a target pragma, so the library itself needs
// no -march flag; only the selection functions at the bottom (outside the pragma) run on any CPU.
#include "core/bfloat16.h"
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/gemm_pack.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

// (clang has no push_options: its attribute pragma gives every function up to the pop the same target.)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,fma,prfchw"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,fma,prfchw")
#endif
// NOTE: GCC 12 warns "__Y is used uninitialized" inside its own AVX-512 intrinsic headers
// (their deliberate self-initialized undefined vectors); the warning is about the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // (GCC's alone)
#endif

namespace ember::cpu::detail {
namespace {

struct Float32Ops {
  using T = float;
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec broadcast(T x) { return _mm512_set1_ps(x); }
  static Vec load(const T* p) { return _mm512_loadu_ps(p); }
  static Vec load(Mask m, const T* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(T* p, Mask m, Vec v) { _mm512_mask_storeu_ps(p, m, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
};

struct Float64Ops {
  using T = double;
  using Vec = __m512d;
  using Mask = __mmask8;
  static constexpr int kLanes = 8;
  static Vec zero() { return _mm512_setzero_pd(); }
  static Vec broadcast(T x) { return _mm512_set1_pd(x); }
  static Vec load(const T* p) { return _mm512_loadu_pd(p); }
  static Vec load(Mask m, const T* p) { return _mm512_maskz_loadu_pd(m, p); }
  static void store(T* p, Mask m, Vec v) { _mm512_mask_storeu_pd(p, m, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_pd(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_pd(a, b); }
  static Vec add(Vec a, Vec b) { return _mm512_add_pd(a, b); }
};

// How a tile's sums are written: C = sums (alpha 1, beta 0), C += sums (alpha 1, beta 1), or the
// general C = alpha sums + beta C. The two common cases get their own copy of the loop, which then
// keeps no alpha in a register: 28 accumulators, 2 B vectors and 1 broadcast fill all 32 zmm
// registers, and one more live value would push an accumulator out to the stack.
// Bias: the sums start from a bias row instead of 0 and overwrite C.
enum class Store { Overwrite, Accumulate, General, Bias };

// One kRows x (kVecs * lanes) tile; the A panel holds kPanelRows rows (kRows <= kPanelRows).
// kPanelRows == kDirectA: A is read in place instead, element (r, k) at a[r * a_rs + k * a_cs].
constexpr int kDirectA = 0;
template <typename Ops, int kRows, int kVecs, int kPanelRows, Store kStore>
void tile_with(int64_t kc, const typename Ops::T* a, const typename Ops::T* b, typename Ops::T* c,
               int64_t c_rs, int n_cols, typename Ops::T alpha, typename Ops::T beta,
               const typename Ops::T* bias = nullptr, int64_t a_rs = 1, int64_t a_cs = kPanelRows) {
  using Vec = typename Ops::Vec;
  using Mask = typename Ops::Mask;
  constexpr int kLanes = Ops::kLanes;

  const Mask all = static_cast<Mask>(~0u);
  const int last_lanes = n_cols - (kVecs - 1) * kLanes;  // 1..kLanes
  const Mask last = last_lanes == kLanes ? all : static_cast<Mask>((1u << last_lanes) - 1);
  Vec acc[kRows][kVecs];
#pragma GCC unroll 32
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      if constexpr (kStore == Store::Bias) acc[r][v] = Ops::load(v == kVecs - 1 ? last : all, bias + v * kLanes);
      else acc[r][v] = Ops::zero();
    }
  }
  // Pull the C tile into L1, for writing (prefetchw), while the FMAs run.
#pragma GCC unroll 32
  for (int r = 0; r < kRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * c_rs), _MM_HINT_ET0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * c_rs + kVecs * kLanes - 1), _MM_HINT_ET0);
  }

#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    Vec b_row[kVecs];
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) b_row[v] = Ops::load(b + v * kLanes);
#pragma GCC unroll 32
    for (int r = 0; r < kRows; ++r) {
      Vec a_value = Ops::broadcast(kPanelRows == kDirectA ? a[r * a_rs] : a[r]);
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) acc[r][v] = Ops::fma(a_value, b_row[v], acc[r][v]);
    }
    a += kPanelRows == kDirectA ? a_cs : kPanelRows;
    b += kVecs * kLanes;
  }

#pragma GCC unroll 32
  for (int r = 0; r < kRows; ++r) {
    typename Ops::T* row = c + r * c_rs;
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      Mask mask = v == kVecs - 1 ? last : all;
      Vec out = acc[r][v];
      if constexpr (kStore == Store::Accumulate) {
        out = Ops::add(out, Ops::load(mask, row + v * kLanes));
      } else if constexpr (kStore == Store::General) {
        out = Ops::mul(out, Ops::broadcast(alpha));
        if (beta != 0) out = Ops::fma(Ops::broadcast(beta), Ops::load(mask, row + v * kLanes), out);
      }
      Ops::store(row + v * kLanes, mask, out);
    }
  }
}

template <typename Ops, int kRows, int kVecs, int kPanelRows>
void tile(int64_t kc, const typename Ops::T* a, const typename Ops::T* b, typename Ops::T* c,
          int64_t c_rs, int n_cols, typename Ops::T alpha, typename Ops::T beta) {
  if (alpha == 1 && beta == 0)
    tile_with<Ops, kRows, kVecs, kPanelRows, Store::Overwrite>(kc, a, b, c, c_rs, n_cols, alpha, beta);
  else if (alpha == 1 && beta == 1)
    tile_with<Ops, kRows, kVecs, kPanelRows, Store::Accumulate>(kc, a, b, c, c_rs, n_cols, alpha, beta);
  else
    tile_with<Ops, kRows, kVecs, kPanelRows, Store::General>(kc, a, b, c, c_rs, n_cols, alpha, beta);
}

template <typename Ops, int kRows, int kVecs, int kPanelRows>
void tile_bias(int64_t kc, const typename Ops::T* a, const typename Ops::T* b, typename Ops::T* c,
               int64_t c_rs, int n_cols, const typename Ops::T* bias) {
  tile_with<Ops, kRows, kVecs, kPanelRows, Store::Bias>(kc, a, b, c, c_rs, n_cols, 1, 0, bias);
}

template <typename Ops>
using Tile = void (*)(int64_t, const typename Ops::T*, const typename Ops::T*, typename Ops::T*,
                      int64_t, int, typename Ops::T, typename Ops::T);
template <typename Ops>
using BiasTile = void (*)(int64_t, const typename Ops::T*, const typename Ops::T*, typename Ops::T*,
                          int64_t, int, const typename Ops::T*);

// table[rows - 1][vecs - 1] = tile<rows, vecs>.
template <typename Ops, int kPanelRows, int kRows, int... kVecsMinus1>
constexpr auto tile_row(std::integer_sequence<int, kVecsMinus1...>) {
  return std::array<Tile<Ops>, sizeof...(kVecsMinus1)>{&tile<Ops, kRows, kVecsMinus1 + 1, kPanelRows>...};
}
template <typename Ops, int kPanelRows, int kMaxVecs, int... kRowsMinus1>
constexpr auto tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<Tile<Ops>, kMaxVecs>, sizeof...(kRowsMinus1)>{
      tile_row<Ops, kPanelRows, kRowsMinus1 + 1>(std::make_integer_sequence<int, kMaxVecs>{})...};
}

template <typename Ops, int kPanelRows, int kRows, int... kVecsMinus1>
constexpr auto bias_tile_row(std::integer_sequence<int, kVecsMinus1...>) {
  return std::array<BiasTile<Ops>, sizeof...(kVecsMinus1)>{&tile_bias<Ops, kRows, kVecsMinus1 + 1, kPanelRows>...};
}
template <typename Ops, int kPanelRows, int kMaxVecs, int... kRowsMinus1>
constexpr auto bias_tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<BiasTile<Ops>, kMaxVecs>, sizeof...(kRowsMinus1)>{
      bias_tile_row<Ops, kPanelRows, kRowsMinus1 + 1>(std::make_integer_sequence<int, kMaxVecs>{})...};
}

template <typename Ops, int kMR, int kNV>
void bias_tile_any_size(int64_t kc, const typename Ops::T* a, const typename Ops::T* b, typename Ops::T* c,
                        int64_t c_rs, int m_rows, int n_cols, const typename Ops::T* bias) {
  static constexpr auto table = bias_tile_table<Ops, kMR, kNV>(std::make_integer_sequence<int, kMR>{});
  int vecs = (n_cols + Ops::kLanes - 1) / Ops::kLanes;
  table[m_rows - 1][vecs - 1](kc, a, b, c, c_rs, n_cols, bias);
}

// A read in place (no packed panel): for a product whose B block is one micro-panel wide, each element of A
// meets B once, so packing it would cost as much as using it.
template <typename Ops, int kRows, int kVecs>
void tile_direct(int64_t kc, const typename Ops::T* a, int64_t a_rs, int64_t a_cs, const typename Ops::T* b,
                 typename Ops::T* c, int64_t c_rs, int n_cols, typename Ops::T alpha, typename Ops::T beta) {
  if (alpha == 1 && beta == 0)
    tile_with<Ops, kRows, kVecs, kDirectA, Store::Overwrite>(kc, a, b, c, c_rs, n_cols, alpha, beta, nullptr, a_rs, a_cs);
  else if (alpha == 1 && beta == 1)
    tile_with<Ops, kRows, kVecs, kDirectA, Store::Accumulate>(kc, a, b, c, c_rs, n_cols, alpha, beta, nullptr, a_rs,
                                                              a_cs);
  else
    tile_with<Ops, kRows, kVecs, kDirectA, Store::General>(kc, a, b, c, c_rs, n_cols, alpha, beta, nullptr, a_rs, a_cs);
}

template <typename Ops>
using DirectTile = void (*)(int64_t, const typename Ops::T*, int64_t, int64_t, const typename Ops::T*,
                            typename Ops::T*, int64_t, int, typename Ops::T, typename Ops::T);

template <typename Ops, int kRows, int... kVecsMinus1>
constexpr auto direct_tile_row(std::integer_sequence<int, kVecsMinus1...>) {
  return std::array<DirectTile<Ops>, sizeof...(kVecsMinus1)>{&tile_direct<Ops, kRows, kVecsMinus1 + 1>...};
}
template <typename Ops, int kMaxVecs, int... kRowsMinus1>
constexpr auto direct_tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<DirectTile<Ops>, kMaxVecs>, sizeof...(kRowsMinus1)>{
      direct_tile_row<Ops, kRowsMinus1 + 1>(std::make_integer_sequence<int, kMaxVecs>{})...};
}

template <typename Ops, int kMR, int kNV>
void direct_tile_any_size(int64_t kc, const typename Ops::T* a, int64_t a_rs, int64_t a_cs,
                          const typename Ops::T* b, typename Ops::T* c, int64_t c_rs, int m_rows, int n_cols,
                          typename Ops::T alpha, typename Ops::T beta) {
  static constexpr auto table = direct_tile_table<Ops, kNV>(std::make_integer_sequence<int, kMR>{});
  int vecs = (n_cols + Ops::kLanes - 1) / Ops::kLanes;
  table[m_rows - 1][vecs - 1](kc, a, a_rs, a_cs, b, c, c_rs, n_cols, alpha, beta);
}

template <typename Ops, int kMR, int kNV>
void tile_any_size(int64_t kc, const typename Ops::T* a, const typename Ops::T* b,
                   typename Ops::T* c, int64_t c_rs, int m_rows, int n_cols, typename Ops::T alpha,
                   typename Ops::T beta) {
  static constexpr auto table =
      tile_table<Ops, kMR, kNV>(std::make_integer_sequence<int, kMR>{});
  int vecs = (n_cols + Ops::kLanes - 1) / Ops::kLanes;
  table[m_rows - 1][vecs - 1](kc, a, b, c, c_rs, n_cols, alpha, beta);
}

// ---------------------------------------------------------------------------------------------
// Float packing with 16x16 in-register transposes: the common layouts (row-major A, and B^T)
// are transposed 256 elements at a time instead of one scalar at a time.

// rows[i][j] -> rows[j][i]. Four shuffle stages, 64 shuffles in all.
inline __attribute__((always_inline)) void transpose_16x16(__m512 rows[16]) {
  __m512 pairs[16], quads[16];
  // Stage 1, per 128-bit lane L: pairs[2i] = (r2i[4L], r2i+1[4L], r2i[4L+1], r2i+1[4L+1]), ...
  for (int i = 0; i < 8; ++i) {
    pairs[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    pairs[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  // Stage 2: quads[4g + c], lane L = rows 4g..4g+3 of column 4L + c.
  for (int g = 0; g < 4; ++g) {
    quads[4 * g + 0] = _mm512_shuffle_ps(pairs[4 * g], pairs[4 * g + 2], 0x44);
    quads[4 * g + 1] = _mm512_shuffle_ps(pairs[4 * g], pairs[4 * g + 2], 0xEE);
    quads[4 * g + 2] = _mm512_shuffle_ps(pairs[4 * g + 1], pairs[4 * g + 3], 0x44);
    quads[4 * g + 3] = _mm512_shuffle_ps(pairs[4 * g + 1], pairs[4 * g + 3], 0xEE);
  }
  // Stages 3-4: column 4L + c gathers lane L of quads[c], quads[4 + c], quads[8 + c], quads[12 + c].
  for (int c = 0; c < 4; ++c) {
    __m512 low_even = _mm512_shuffle_f32x4(quads[c], quads[4 + c], 0x88);   // lanes 0,2 | 0,2
    __m512 low_odd = _mm512_shuffle_f32x4(quads[c], quads[4 + c], 0xDD);    // lanes 1,3 | 1,3
    __m512 high_even = _mm512_shuffle_f32x4(quads[8 + c], quads[12 + c], 0x88);
    __m512 high_odd = _mm512_shuffle_f32x4(quads[8 + c], quads[12 + c], 0xDD);
    rows[c] = _mm512_shuffle_f32x4(low_even, high_even, 0x88);
    rows[8 + c] = _mm512_shuffle_f32x4(low_even, high_even, 0xDD);
    rows[4 + c] = _mm512_shuffle_f32x4(low_odd, high_odd, 0x88);
    rows[12 + c] = _mm512_shuffle_f32x4(low_odd, high_odd, 0xDD);
  }
}

__mmask16 first_lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1);
}

// What the float packers read, 16 lanes at a time (masked lanes read as 0): float32 as it is (the float GEMM);
// or, for the bfloat16 GEMM's "rounded" kernel (gemm_bf16_rounded.cpp), float32 as the float of its bfloat16
// rounding (BFloat16::round_to_bits on each lane: nearest even, NaN kept quiet), or bfloat16 widened (exact).
// Convert: the same for the scalar packers of other strides (gemm_pack.h). NOTE: the rounding is written out
// here rather than taken from lanes.h (store_rounded): an inline function of a shared header compiled under
// this file's target could be the copy the linker keeps for everyone (gemm_kernels.h's NOTE).
struct LoadFloat {
  using Source = float;
  using Convert = Same;
  static __m512 load(const float* p, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, p); }
};
struct LoadRounded {
  using Source = float;
  using Convert = RoundedToBf16;
  static __m512 load(const float* p, __mmask16 lanes) {
    const __m512 v = _mm512_maskz_loadu_ps(lanes, p);
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i high = _mm512_set1_epi32(int(0xFFFF0000u));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd)), high);
    const __m512i quiet_nan = _mm512_or_si512(_mm512_and_si512(x, high), _mm512_set1_epi32(0x00400000));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet_nan));
  }
};
struct LoadWidened {
  using Source = BFloat16;
  using Convert = RoundedToBf16;
  static __m512 load(const BFloat16* p, __mmask16 lanes) {
    const __m256i words = _mm256_maskz_loadu_epi16(lanes, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(words), 16));
  }
};

// The column-major A and row-major B packers write several panels, each (kc x a panel's width) long: for a
// whole K block a multiple of 4 KiB (kc = 512: A's 14-row panels 28 KiB apart, B's 32-column ones 64 KiB).
// Walking all panels for each k (to read each row once, front to back) puts every store stream in one L1 set
// (its index is bits 6 to 11 of the address), where they evict one another; walking one panel for all k's
// jumps a row (often KiBs) per k and fetches each line again for the next panel. They take the k's in groups:
// a group's rows are read once, front to back, and stay in L1 while each panel gets the group's length.
constexpr int64_t kKGroup = 16;

template <int kMR, typename Load = LoadFloat>
void pack_a_float(const typename Load::Source* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, float* out) {
  using S = typename Load::Source;
  static_assert(kMR <= 16, "an A micro-panel column must fit one vector");
  const __mmask16 panel_lanes = first_lanes(kMR);
  const bool ahead = prefetches_rows((a_cs == 1 ? a_rs : a_cs) * int64_t(sizeof(S)));  // (gemm_kernels.h)
  if (a_cs == 1) {  // row-major A: transpose 16 (rows) x 16 (k) blocks
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      const int64_t rows = std::min<int64_t>(kMR, m - i0);
      for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        const int64_t k_count = std::min<int64_t>(16, kc - k0);
        const __mmask16 k_lanes = first_lanes(k_count);
        __m512 block[16];
        if (ahead)  // the rows of the panel after next (kPrefetchPanels), same k's
          for (int r = 0; r < kMR; ++r) prefetch_at(A, ((i0 + kPrefetchPanels * kMR + r) * a_rs + k0) * int64_t(sizeof(S)));
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          block[r] = r < rows ? Load::load(A + (i0 + r) * a_rs + k0, k_lanes) : _mm512_setzero_ps();
        }
        transpose_16x16(block);
        for (int64_t k = 0; k < k_count; ++k) {
          _mm512_mask_storeu_ps(out + (k0 + k) * kMR, panel_lanes, block[k]);
        }
      }
      out += kMR * kc;
    }
  } else if (a_rs == 1) {
    // Column-major A (A^T of a row-major matrix): each k is a contiguous run of all m rows. A group of
    // kKGroup runs is read front to back once, panel by panel (kKGroup: why not all k's per panel, or all
    // panels per k).
    for (int64_t k0 = 0; k0 < kc; k0 += kKGroup) {
      const int64_t k1 = std::min(kc, k0 + kKGroup);
      for (int64_t i0 = 0; i0 < m; i0 += kMR) {
        const __mmask16 row_lanes = first_lanes(std::min<int64_t>(kMR, m - i0));
        for (int64_t k = k0; k < k1; ++k) {
          if (ahead) prefetch_at(A, ((k + kPrefetchRows) * a_cs + i0) * int64_t(sizeof(S)));
          _mm512_mask_storeu_ps(out + i0 * kc + k * kMR, panel_lanes, Load::load(A + k * a_cs + i0, row_lanes));
        }
      }
    }
  } else {
    pack_a_generic<S, kMR, float, typename Load::Convert>(A, a_rs, a_cs, m, kc, out);
  }
}

template <int kNR, typename Load = LoadFloat>
void pack_b_float(const typename Load::Source* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, float* out) {
  using S = typename Load::Source;
  static_assert(kNR % 16 == 0, "B micro-panels are whole vectors wide");
  constexpr int kVectors = kNR / 16;
  const int64_t full_panels = n / kNR;
  const int64_t tail_cols = n - full_panels * kNR;  // the last, narrower panel (0: none)
  const int64_t tail_width = (tail_cols + 15) / 16 * 16;
  float* tail_out = out + full_panels * kNR * kc;
  const bool ahead = prefetches_rows(b_rs * int64_t(sizeof(S)));  // row-major B's rows (gemm_kernels.h)
  if (b_cs == 1) {
    // Row-major B: a group of kKGroup rows (each k a contiguous run of columns) read front to back once,
    // panel by panel (kKGroup: why not one panel for all k's, or all panels per k).
    for (int64_t k0 = 0; k0 < kc; k0 += kKGroup) {
      const int64_t k1 = std::min(kc, k0 + kKGroup);
      for (int64_t q = 0; q < full_panels; ++q) {
        for (int64_t k = k0; k < k1; ++k) {
#pragma GCC unroll 4
          for (int v = 0; v < kVectors; ++v) {
            if (ahead) prefetch_at(B, ((k + kPrefetchRows) * b_rs + q * kNR + 16 * v) * int64_t(sizeof(S)));
            _mm512_storeu_ps(out + q * kNR * kc + k * kNR + 16 * v, Load::load(B + k * b_rs + q * kNR + 16 * v, 0xFFFF));
          }
        }
      }
      for (int64_t k = k0; k < k1; ++k) {
        for (int64_t v = 0; v * 16 < tail_cols; ++v) {
          const __mmask16 lanes = first_lanes(tail_cols - 16 * v);
          _mm512_storeu_ps(tail_out + k * tail_width + 16 * v, Load::load(B + k * b_rs + full_panels * kNR + 16 * v, lanes));
        }
      }
    }
  } else if (b_rs == 1) {
    // B^T: transpose 16 (columns) x 16 (k) blocks; column j of B is contiguous in k.
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int64_t q = j0 / kNR;
      const int64_t width = q < full_panels ? kNR : tail_width;
      float* panel = out + q * kNR * kc + (j0 - q * kNR);
      const int64_t group_cols = std::min<int64_t>(16, n - j0);
      for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        const int64_t k_count = std::min<int64_t>(16, kc - k0);
        const __mmask16 k_lanes = first_lanes(k_count);
        __m512 block[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) {
          block[j] = j < group_cols ? Load::load(B + (j0 + j) * b_cs + k0, k_lanes) : _mm512_setzero_ps();
        }
        transpose_16x16(block);
        for (int64_t k = 0; k < k_count; ++k) _mm512_storeu_ps(panel + (k0 + k) * width, block[k]);
      }
    }
  } else {
    pack_b_generic<S, kNR, 16, float, typename Load::Convert>(B, b_rs, b_cs, kc, n, out);
  }
}

// Float tile and blocking, picked by measurement on a Sapphire-Rapids-class Xeon (48 KiB L1d,
// 2 MiB L2 per core). 14 x 32 beat 12 x 32, 8 x 48, 6 x 64, 7 x 64 and 28 x 16 or tied.
//   kc 512: the A micro-panel (14 x 512 floats = 28 KiB) stays in L1; K <= 512 is one pass.
//   nc 512: the packed B block (512 x 512 floats = 1 MiB) stays in L2.
//   mc 168: 12 A micro-panels packed at a time.
// NOTE: the -D overrides exist for tuning experiments (compile this file with other values).
#ifndef EMBER_AVX512_MR
#define EMBER_AVX512_MR 14
#endif
#ifndef EMBER_AVX512_NV
#define EMBER_AVX512_NV 2
#endif
#ifndef EMBER_AVX512_KC
#define EMBER_AVX512_KC 512
#endif
#ifndef EMBER_AVX512_MC
#define EMBER_AVX512_MC 168
#endif
#ifndef EMBER_AVX512_NC
#define EMBER_AVX512_NC 512
#endif

constexpr int kFloatMR = EMBER_AVX512_MR;
constexpr int kFloatNV = EMBER_AVX512_NV;
// Double (gradchecks): the same 14-row tile, 2 vectors of 8 lanes; generic packing.
constexpr int kDoubleMR = 14;
constexpr int kDoubleNV = 2;

// A float tile stored as bfloat16 (the "rounded" kernels' bfloat16 C): LoadRounded's rounding, 16 lanes at a
// time, the high halves narrowed by a masked vpmovdw store.
void round_rows(const float* in, int64_t in_rs, BFloat16* out, int64_t out_rs, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; j += 16) {
      const __mmask16 lanes = first_lanes(cols - j);
      const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(LoadRounded::load(in + r * in_rs + j, lanes)), 16);
      _mm512_mask_cvtepi32_storeu_epi16(out + r * out_rs + j, lanes, bits);
    }
}

template <typename Load>
constexpr GemmKernel<typename Load::Source, float, float> rounded_kernel() {
  return {"avx512", kFloatMR, kFloatNV * 16, 16, EMBER_AVX512_KC, EMBER_AVX512_MC, EMBER_AVX512_NC,
          &tile_any_size<Float32Ops, kFloatMR, kFloatNV>, &pack_a_float<kFloatMR, Load>,
          &pack_b_float<kFloatNV * 16, Load>, &bias_tile_any_size<Float32Ops, kFloatMR, kFloatNV>, 1,
          nullptr, &round_rows};
}

}  // namespace

// Kernel descriptions: constant data, safe to build on any CPU.
const GemmKernel<float> kAvx512Float = {"avx512", kFloatMR, kFloatNV * 16, 16,
                                        EMBER_AVX512_KC, EMBER_AVX512_MC, EMBER_AVX512_NC,
                                        &tile_any_size<Float32Ops, kFloatMR, kFloatNV>,
                                        &pack_a_float<kFloatMR>, &pack_b_float<kFloatNV * 16>,
                                        &bias_tile_any_size<Float32Ops, kFloatMR, kFloatNV>, 1,
                                        &direct_tile_any_size<Float32Ops, kFloatMR, kFloatNV>};
const GemmKernel<double> kAvx512Double = {"avx512", kDoubleMR, kDoubleNV * 8, 8, 256, 126, 512,
                                          &tile_any_size<Float64Ops, kDoubleMR, kDoubleNV>,
                                          &pack_a_generic<double, kDoubleMR>,
                                          &pack_b_generic<double, kDoubleNV * 8, 8>};
// The bfloat16 GEMM on the float kernel (gemm_bf16_rounded.cpp): float32 operands rounded, bfloat16 widened.
const GemmKernel<float, float, float> kAvx512RoundedFromFloat = rounded_kernel<LoadRounded>();
const GemmKernel<BFloat16, float, float> kAvx512RoundedFromBf16 = rounded_kernel<LoadWidened>();

}  // namespace ember::cpu::detail

#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace ember::cpu::detail {

static bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma");  // (the file's target: every AVX-512 CPU but Xeon Phi)
}

const GemmKernel<float>* avx512_float_kernel() { return cpu_has_avx512() ? &kAvx512Float : nullptr; }
const GemmKernel<double>* avx512_double_kernel() { return cpu_has_avx512() ? &kAvx512Double : nullptr; }
template <>
const GemmKernel<float, float, float>* avx512_rounded_kernel<float>() {
  return cpu_has_avx512() ? &kAvx512RoundedFromFloat : nullptr;
}
template <>
const GemmKernel<BFloat16, float, float>* avx512_rounded_kernel<BFloat16>() {
  return cpu_has_avx512() ? &kAvx512RoundedFromBf16 : nullptr;
}

}  // namespace ember::cpu::detail

#else  // not x86-64 GCC/Clang: no AVX-512 kernels

namespace ember::cpu::detail {
const GemmKernel<float>* avx512_float_kernel() { return nullptr; }
const GemmKernel<double>* avx512_double_kernel() { return nullptr; }
template <>
const GemmKernel<float, float, float>* avx512_rounded_kernel<float>() { return nullptr; }
template <>
const GemmKernel<BFloat16, float, float>* avx512_rounded_kernel<BFloat16>() { return nullptr; }
}  // namespace ember::cpu::detail

#endif
