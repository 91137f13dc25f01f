// The bfloat16 GEMM micro-kernel on AVX-512 BF16: vdpbf16ps multiplies pairs of bfloat16 and adds both
// products to a float32 lane, so one instruction does 32 multiply-adds where an FMA does 16.
//
// K is taken two at a time. Packed layouts (uint16 elements; pair p holds k = 2p and 2p + 1):
//   A micro-panel (mr rows):   pair p of row r   at a_panel[2 * (p * mr + r) + (k & 1)]
//   B micro-panel (width w):   pair p of col j   at b_panel[2 * (p * w + j) + (k & 1)]
// An odd kc is padded with a zero k (in both A and B, so that no 0 * NaN can appear).
//
// Register tile 14 x 32, as the float kernel's (gemm_avx512.cpp):
//            b_panel pair p:  [ 16 lanes x 2 bf16 | 16 lanes x 2 bf16 ]   <- 2 vector loads
//   a pair (0, p) broadcast   [      acc 0,0       |      acc 0,1       ]
//      ...                                                                  28 accumulators
//   a pair (13, p) broadcast  [     acc 13,0       |     acc 13,1       ]
// Each pair: 2 loads of B, 14 broadcasts of A, 28 vdpbf16ps = 896 multiply-adds.
//
// Packing converts float32 operands to bfloat16 on the way (vcvtne2ps2bf16: round to nearest even,
// NaN kept; NOTE: like vdpbf16ps itself, it flushes subnormal inputs and outputs to zero), so a
// float32 tensor needs no conversion pass of its own. bfloat16 operands are packed as they are.
// NOTE: compiled for AVX-512 BF16 through a target pragma; only the selection at the bottom runs
// on any CPU.
#include <cstdint>
#include <cstring>

#include "core/bfloat16.h"
#include "core/cpu/gemm_kernels.h"

// NOTE: not with clang 16 (CI's sanitizer build): it crashes optimising these kernels (an optimiser
// recursion without end, at -O1 and above) and at -O0 they gave zeros; there the bfloat16 products
// take the other kernels. Not yet understood: see the commit that added this.
#if defined(__x86_64__) && defined(__GNUC__) && !(defined(__clang__) && __clang_major__ < 17)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

// (clang has no push_options: its attribute pragma gives every function up to the pop the same target.)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,fma,prfchw"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,fma,prfchw")
#endif
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // (GCC's alone)
#endif

namespace ember::cpu::detail {
namespace {

constexpr int kMR = 14;
constexpr int kNV = 2;
constexpr int kNR = 16 * kNV;

enum class Store { Overwrite, Accumulate, General, Bias, Bf16 };

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// One kRows x (kVecs * 16) tile of C from kc k's (ceil(kc / 2) pairs). kDirect: A is read in place, the pair
// (k, k + 1) of row r as the two adjacent words at a + r * a_rs + k * a_cs (a bfloat16 row-major A, a_cs 1; or
// a pair-major one, gemm.h's gemm_bf16_pair_major: a_rs 2, a_cs half its pair stride; an odd kc's last k is
// paired with a zero, as packing pads it), instead of from a packed panel.
// Store::Bf16: C is bfloat16 (COut uint16_t), beta 0: alpha times the sums, plus the bias (if any), each entry
// rounded as it is stored (gemm_kernels.h's tile_to_bf16: the bias first for a packed A and alpha 1).
template <int kRows, int kVecs, Store kStore, bool kDirect = false, typename COut = float>
void tile_with(int64_t kc, const uint16_t* a, const uint16_t* b, COut* c, int64_t c_rs, int n_cols, float alpha,
               float beta, const float* bias = nullptr, int64_t a_rs = 0, int64_t a_cs = 1) {
  const __mmask16 all = 0xFFFF;
  const int last_lanes = n_cols - (kVecs - 1) * 16;
  const __mmask16 last = last_lanes == 16 ? all : static_cast<__mmask16>((1u << last_lanes) - 1);
  __m512 acc[kRows][kVecs];
#pragma GCC unroll 32
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      if constexpr (kStore == Store::Bias) acc[r][v] = _mm512_maskz_loadu_ps(v == kVecs - 1 ? last : all, bias + v * 16);
      else acc[r][v] = _mm512_setzero_ps();
      if constexpr (kStore == Store::Bf16 && !kDirect)
        if (bias != nullptr && alpha == 1) acc[r][v] = _mm512_maskz_loadu_ps(v == kVecs - 1 ? last : all, bias + v * 16);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < kRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * c_rs), _MM_HINT_ET0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * c_rs + kVecs * 16 - 1), _MM_HINT_ET0);
  }
  // One pair step: B's two vectors, then each row's pair broadcast (odd_tail: the pair is (A's last k, 0)).
  auto step = [&](bool odd_tail) __attribute__((always_inline)) {
    __m512bh b_row[kVecs];
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) b_row[v] = as_bh(_mm512_loadu_si512(b + v * 32));
#pragma GCC unroll 32
    for (int r = 0; r < kRows; ++r) {
      int32_t pair = 0;
      if (!kDirect) std::memcpy(&pair, a + 2 * r, sizeof pair);
      else if (!odd_tail) std::memcpy(&pair, a + r * a_rs, sizeof pair);
      else pair = a[r * a_rs];
      const __m512bh a_pair = as_bh(_mm512_set1_epi32(pair));
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a_pair, b_row[v]);
    }
    a += kDirect ? 2 * a_cs : 2 * kMR;
    b += kVecs * 32;
  };
  const int64_t pairs = kDirect ? kc / 2 : (kc + 1) / 2;
#pragma GCC unroll 2
  for (int64_t p = 0; p < pairs; ++p) step(false);
  if (kDirect && kc % 2 == 1) step(true);
#pragma GCC unroll 32
  for (int r = 0; r < kRows; ++r) {
    COut* row = c + r * c_rs;
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      const __mmask16 mask = v == kVecs - 1 ? last : all;
      __m512 out = acc[r][v];
      if constexpr (kStore == Store::Bf16) {
        if (alpha != 1) out = _mm512_mul_ps(out, _mm512_set1_ps(alpha));
        if (bias != nullptr && (kDirect || alpha != 1)) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, bias + v * 16));
        const __m256bh narrow = _mm512_cvtneps_pbh(out);  // as round_rows: nearest even, NaN kept
        _mm256_mask_storeu_epi16(row + v * 16, mask, reinterpret_cast<const __m256i&>(narrow));
        continue;
      }
      if constexpr (kStore == Store::Accumulate) {
        out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, row + v * 16));
      } else if constexpr (kStore == Store::General) {
        out = _mm512_mul_ps(out, _mm512_set1_ps(alpha));
        if (beta != 0) out = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, row + v * 16), out);
      }
      _mm512_mask_storeu_ps(row + v * 16, mask, out);
    }
  }
}

template <int kRows, int kVecs>
void tile(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t c_rs, int n_cols, float alpha,
          float beta) {
  if (alpha == 1 && beta == 0) tile_with<kRows, kVecs, Store::Overwrite>(kc, a, b, c, c_rs, n_cols, alpha, beta);
  else if (alpha == 1 && beta == 1) tile_with<kRows, kVecs, Store::Accumulate>(kc, a, b, c, c_rs, n_cols, alpha, beta);
  else tile_with<kRows, kVecs, Store::General>(kc, a, b, c, c_rs, n_cols, alpha, beta);
}

template <int kRows, int kVecs>
void tile_bias(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t c_rs, int n_cols,
               const float* bias) {
  tile_with<kRows, kVecs, Store::Bias>(kc, a, b, c, c_rs, n_cols, 1, 0, bias);
}

// A read in place (see tile_with), row-major bfloat16 (a_cs 1) or pair-major (gemm_bf16_pair_major: a_rs 2,
// a_cs half the pair stride): the two words of a pair are adjacent either way. For a product whose B block is
// one micro-panel wide, where each element of A meets B once and packing it would cost about what using it does.
template <int kRows, int kVecs>
void tile_direct(int64_t kc, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b, float* c, int64_t c_rs,
                 int n_cols, float alpha, float beta) {
  if (alpha == 1 && beta == 0)
    tile_with<kRows, kVecs, Store::Overwrite, true>(kc, a, b, c, c_rs, n_cols, alpha, beta, nullptr, a_rs, a_cs);
  else if (alpha == 1 && beta == 1)
    tile_with<kRows, kVecs, Store::Accumulate, true>(kc, a, b, c, c_rs, n_cols, alpha, beta, nullptr, a_rs, a_cs);
  else
    tile_with<kRows, kVecs, Store::General, true>(kc, a, b, c, c_rs, n_cols, alpha, beta, nullptr, a_rs, a_cs);
}

// The tile into a bfloat16 C (gemm_kernels.h's Bf16TileFunction): a_rs 0, a packed A; else A in place.
template <int kRows, int kVecs>
void tile_bf16(int64_t kc, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b, BFloat16* c, int64_t c_rs,
               int n_cols, float alpha, const float* bias) {
  uint16_t* words = reinterpret_cast<uint16_t*>(c);
  if (a_rs == 0) tile_with<kRows, kVecs, Store::Bf16, false, uint16_t>(kc, a, b, words, c_rs, n_cols, alpha, 0, bias);
  else tile_with<kRows, kVecs, Store::Bf16, true, uint16_t>(kc, a, b, words, c_rs, n_cols, alpha, 0, bias, a_rs, a_cs);
}

using Tile = void (*)(int64_t, const uint16_t*, const uint16_t*, float*, int64_t, int, float, float);
using DirectTile = void (*)(int64_t, const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, int, float,
                            float);
using BiasTile = void (*)(int64_t, const uint16_t*, const uint16_t*, float*, int64_t, int, const float*);
using Bf16Tile = void (*)(int64_t, const uint16_t*, int64_t, int64_t, const uint16_t*, BFloat16*, int64_t, int, float,
                          const float*);

// table[rows - 1][vecs - 1]
template <int... kRowsMinus1>
constexpr auto tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<Tile, 2>, sizeof...(kRowsMinus1)>{
      std::array<Tile, 2>{&tile<kRowsMinus1 + 1, 1>, &tile<kRowsMinus1 + 1, 2>}...};
}
template <int... kRowsMinus1>
constexpr auto direct_tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<DirectTile, 2>, sizeof...(kRowsMinus1)>{
      std::array<DirectTile, 2>{&tile_direct<kRowsMinus1 + 1, 1>, &tile_direct<kRowsMinus1 + 1, 2>}...};
}
template <int... kRowsMinus1>
constexpr auto bias_tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<BiasTile, 2>, sizeof...(kRowsMinus1)>{
      std::array<BiasTile, 2>{&tile_bias<kRowsMinus1 + 1, 1>, &tile_bias<kRowsMinus1 + 1, 2>}...};
}

template <int... kRowsMinus1>
constexpr auto bf16_tile_table(std::integer_sequence<int, kRowsMinus1...>) {
  return std::array<std::array<Bf16Tile, 2>, sizeof...(kRowsMinus1)>{
      std::array<Bf16Tile, 2>{&tile_bf16<kRowsMinus1 + 1, 1>, &tile_bf16<kRowsMinus1 + 1, 2>}...};
}

void tile_any_size(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t c_rs, int m_rows, int n_cols,
                   float alpha, float beta) {
  static constexpr auto table = tile_table(std::make_integer_sequence<int, kMR>{});
  table[m_rows - 1][(n_cols + 15) / 16 - 1](kc, a, b, c, c_rs, n_cols, alpha, beta);
}
// NOTE: the pair (k, k + 1) must be two adjacent words (the driver reads A in place only then: gemm.cpp
// reads_a_in_place): a_cs 1, or a pair-major A.
void direct_tile_any_size(int64_t kc, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b, float* c,
                          int64_t c_rs, int m_rows, int n_cols, float alpha, float beta) {
  static constexpr auto table = direct_tile_table(std::make_integer_sequence<int, kMR>{});
  table[m_rows - 1][(n_cols + 15) / 16 - 1](kc, a, a_rs, a_cs, b, c, c_rs, n_cols, alpha, beta);
}
void bf16_tile_any_size(int64_t kc, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b, BFloat16* c,
                        int64_t c_rs, int m_rows, int n_cols, float alpha, const float* bias) {
  static constexpr auto table = bf16_tile_table(std::make_integer_sequence<int, kMR>{});
  table[m_rows - 1][(n_cols + 15) / 16 - 1](kc, a, a_rs, a_cs, b, c, c_rs, n_cols, alpha, bias);
}
void bias_tile_any_size(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t c_rs, int m_rows,
                        int n_cols, const float* bias) {
  static constexpr auto table = bias_tile_table(std::make_integer_sequence<int, kMR>{});
  table[m_rows - 1][(n_cols + 15) / 16 - 1](kc, a, b, c, c_rs, n_cols, bias);
}

// ---------------------------------------------------------------------------------------------
// Packing float32 (rounded) or bfloat16 (copied) operands into bfloat16 pairs

__mmask16 first_lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1);
}

// 32 floats of one row (k0 .. k0 + 31, the first `count` of them read, the rest 0) as 16 bf16 pairs.
inline __m512i row_pairs(const float* p, int64_t count) {
  __m512 low = _mm512_maskz_loadu_ps(first_lanes(count), p);
  __m512 high = count > 16 ? _mm512_maskz_loadu_ps(first_lanes(count - 16), p + 16) : _mm512_setzero_ps();
  return (__m512i)_mm512_cvtne2ps_pbh(high, low);  // words 0..15 = low, 16..31 = high
}

// Two runs of 16 (k and k + 1, each read `count` long) interleaved: lane i = (first[i], second[i]).
inline __m512i interleave_pairs(const float* first, const float* second, int64_t count) {
  const __mmask16 lanes = first_lanes(count);
  __m512 a = _mm512_maskz_loadu_ps(lanes, first);
  __m512 b = second != nullptr ? _mm512_maskz_loadu_ps(lanes, second) : _mm512_setzero_ps();
  const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // 0..15 = a, 16..31 = b
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, words);
}

// The same two loads from bfloat16 operands: copied as they are (no rounding).
inline __m512i row_pairs(const BFloat16* p, int64_t count) {
  const __mmask32 lanes = count >= 32 ? ~__mmask32(0) : (__mmask32(1) << count) - 1;
  return _mm512_maskz_loadu_epi16(lanes, p);  // words 0..31 = k0 .. k0 + 31: pair p = (2p, 2p + 1)
}
inline __m512i interleave_pairs(const BFloat16* first, const BFloat16* second, int64_t count) {
  const __mmask16 lanes = first_lanes(count);
  const __m512i a = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, first));
  const __m512i b = second != nullptr ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, second))
                                      : _mm512_setzero_si512();
  return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));  // lane i = first[i] (low word), second[i] (high)
}

// One element's bfloat16 bits: a float32 rounded (nearest even), a bfloat16 as it is.
inline uint16_t bits_of(float x) { return BFloat16::round_to_bits(x); }
inline uint16_t bits_of(BFloat16 x) { return x.bits; }

// rows[i] lane j -> rows[j] lane i, 32-bit lanes (a pair each). Four shuffle stages.
inline __attribute__((always_inline)) void transpose_16x16(__m512i rows_i[16]) {
  __m512* rows = reinterpret_cast<__m512*>(rows_i);
  __m512 pairs[16], quads[16];
  for (int i = 0; i < 8; ++i) {
    pairs[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    pairs[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    quads[4 * g + 0] = _mm512_shuffle_ps(pairs[4 * g], pairs[4 * g + 2], 0x44);
    quads[4 * g + 1] = _mm512_shuffle_ps(pairs[4 * g], pairs[4 * g + 2], 0xEE);
    quads[4 * g + 2] = _mm512_shuffle_ps(pairs[4 * g + 1], pairs[4 * g + 3], 0x44);
    quads[4 * g + 3] = _mm512_shuffle_ps(pairs[4 * g + 1], pairs[4 * g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    __m512 low_even = _mm512_shuffle_f32x4(quads[c], quads[4 + c], 0x88);
    __m512 low_odd = _mm512_shuffle_f32x4(quads[c], quads[4 + c], 0xDD);
    __m512 high_even = _mm512_shuffle_f32x4(quads[8 + c], quads[12 + c], 0x88);
    __m512 high_odd = _mm512_shuffle_f32x4(quads[8 + c], quads[12 + c], 0xDD);
    rows[c] = _mm512_shuffle_f32x4(low_even, high_even, 0x88);
    rows[8 + c] = _mm512_shuffle_f32x4(low_even, high_even, 0xDD);
    rows[4 + c] = _mm512_shuffle_f32x4(low_odd, high_odd, 0x88);
    rows[12 + c] = _mm512_shuffle_f32x4(low_odd, high_odd, 0xDD);
  }
}

// The interleaving packers write several panels, each (pairs x a panel's width) long: for a whole K block that
// is a multiple of 4 KiB (kc = 1024: A's 14-row panels 28 KiB apart, B's 32-column ones 64 KiB), so stores
// to all panels in turn, pair by pair, would all fall in one L1 set (its index is bits 6 to 11 of the address)
// and evict one another. They take the pairs in groups instead, writing one panel a group's length at a time
// while the group's rows stay in L1.
constexpr int64_t kPairGroup = 8;

// A block m x kc (float32 or bfloat16, any strides) -> mr-row panels of pairs, each round_up(kc, 2) long.
template <typename S>
void pack_a(const S* A, int64_t a_rs, int64_t a_cs, int64_t m, int64_t kc, uint16_t* out) {
  const int64_t pairs = (kc + 1) / 2;
  const bool ahead = prefetches_rows((a_cs == 1 ? a_rs : a_cs) * int64_t(sizeof(S)));  // (gemm_kernels.h)
  const __mmask16 panel_lanes = first_lanes(kMR);
  if (a_cs == 1) {  // row-major: 16 rows x 32 k converted, then transposed as 16 x 16 pairs
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      const int64_t rows = std::min<int64_t>(kMR, m - i0);
      for (int64_t k0 = 0; k0 < kc; k0 += 32) {
        const int64_t count = std::min<int64_t>(32, kc - k0);
        __m512i block[16];
        if (ahead)  // the rows of the panel after next (kPrefetchPanels), the same 32 k's (64 or 128 bytes)
          for (int r = 0; r < kMR; ++r)
            for (int64_t k = k0; k < k0 + 32; k += 64 / int64_t(sizeof(S)))
              prefetch_at(A, ((i0 + kPrefetchPanels * kMR + r) * a_rs + k) * int64_t(sizeof(S)));
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r)
          block[r] = r < rows ? row_pairs(A + (i0 + r) * a_rs + k0, count) : _mm512_setzero_si512();
        transpose_16x16(block);
        const int64_t block_pairs = (count + 1) / 2;
        for (int64_t p = 0; p < block_pairs; ++p)
          _mm512_mask_storeu_epi32(out + 2 * (k0 / 2 + p) * kMR, panel_lanes, block[p]);
      }
      out += 2 * kMR * pairs;
    }
  } else if (a_rs == 1) {  // column-major: columns k and k + 1 are runs of m rows, interleaved
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairGroup) {  // in groups of pairs: see kPairGroup
      const int64_t p1 = std::min(pairs, p0 + kPairGroup);
      for (int64_t i0 = 0; i0 < m; i0 += kMR) {
        const int64_t rows = std::min<int64_t>(kMR, m - i0);
        for (int64_t p = p0; p < p1; ++p) {
          const S* first = A + 2 * p * a_cs;
          const S* second = 2 * p + 1 < kc ? first + a_cs : nullptr;
          if (ahead)
            for (int64_t k = 2 * p; k < 2 * p + 2; ++k) prefetch_at(A, ((k + kPrefetchRows) * a_cs + i0) * int64_t(sizeof(S)));
          _mm512_mask_storeu_epi32(out + 2 * (i0 * pairs + p * kMR), panel_lanes,
                                   interleave_pairs(first + i0, second != nullptr ? second + i0 : nullptr, rows));
        }
      }
    }
  } else {
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      const int64_t rows = std::min<int64_t>(kMR, m - i0);
      for (int64_t k = 0; k < 2 * pairs; ++k)
        for (int r = 0; r < kMR; ++r)
          out[2 * ((k / 2) * kMR + r) + (k & 1)] =
              r < rows && k < kc ? bits_of(A[(i0 + r) * a_rs + k * a_cs]) : uint16_t(0);
      out += 2 * kMR * pairs;
    }
  }
}

// B block kc x n (float32 or bfloat16, any strides) -> 32-column panels of pairs (the last one 16 or 32 wide).
template <typename S>
void pack_b(const S* B, int64_t b_rs, int64_t b_cs, int64_t kc, int64_t n, uint16_t* out) {
  const int64_t pairs = (kc + 1) / 2;
  const bool ahead = prefetches_rows(b_rs * int64_t(sizeof(S)));  // row-major B's rows (gemm_kernels.h)
  auto panel_width = [n](int64_t q) { return std::min<int64_t>(kNR, (std::min<int64_t>(kNR, n - q * kNR) + 15) / 16 * 16); };
  if (b_cs == 1) {  // row-major: rows k and k + 1 interleaved, 16 columns at a time
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairGroup) {  // in groups of pairs: see kPairGroup
      const int64_t p1 = std::min(pairs, p0 + kPairGroup);
      for (int64_t q = 0; q * kNR < n; ++q) {
        uint16_t* panel = out + 2 * q * kNR * pairs;
        for (int64_t p = p0; p < p1; ++p) {
          const S* first = B + 2 * p * b_rs;
          const S* second = 2 * p + 1 < kc ? first + b_rs : nullptr;
          for (int64_t j0 = q * kNR; j0 < std::min(n, (q + 1) * kNR); j0 += 16) {
            if (ahead)
              for (int64_t k = 2 * p; k < 2 * p + 2; ++k) prefetch_at(B, ((k + kPrefetchRows) * b_rs + j0) * int64_t(sizeof(S)));
            _mm512_storeu_si512(panel + 2 * (p * panel_width(q) + (j0 - q * kNR)),
                                interleave_pairs(first + j0, second != nullptr ? second + j0 : nullptr,
                                                 std::min<int64_t>(16, n - j0)));
          }
        }
      }
    }
  } else if (b_rs == 1) {  // B^T: column j is contiguous in k; 16 columns x 32 k, transposed
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int64_t q = j0 / kNR;
      const int64_t width = panel_width(q);
      uint16_t* panel = out + 2 * q * kNR * pairs + 2 * (j0 - q * kNR);
      const int64_t cols = std::min<int64_t>(16, n - j0);
      for (int64_t k0 = 0; k0 < kc; k0 += 32) {
        const int64_t count = std::min<int64_t>(32, kc - k0);
        __m512i block[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j)
          block[j] = j < cols ? row_pairs(B + (j0 + j) * b_cs + k0, count) : _mm512_setzero_si512();
        transpose_16x16(block);
        const int64_t block_pairs = (count + 1) / 2;
        for (int64_t p = 0; p < block_pairs; ++p) _mm512_storeu_si512(panel + 2 * (k0 / 2 + p) * width, block[p]);
      }
    }
  } else {
    for (int64_t q = 0; q * kNR < n; ++q) {
      const int64_t width = panel_width(q), cols = std::min<int64_t>(kNR, n - q * kNR);
      uint16_t* panel = out + 2 * q * kNR * pairs;
      for (int64_t k = 0; k < 2 * pairs; ++k)
        for (int64_t j = 0; j < width; ++j)
          panel[2 * ((k / 2) * width + j) + (k & 1)] =
              j < cols && k < kc ? bits_of(B[k * b_rs + (q * kNR + j) * b_cs]) : uint16_t(0);
    }
  }
}

// A bfloat16 C: float32 rows rounded to nearest even, 16 at a time (vcvtneps2bf16; NaN kept. NOTE: as in
// packing, a subnormal float32 becomes a zero of its sign).
void round_rows(const float* in, int64_t in_rs, BFloat16* out, int64_t out_rs, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; j += 16) {
      const __mmask16 lanes = first_lanes(std::min(16, cols - j));
      const __m256bh narrow = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes, in + r * in_rs + j));
      _mm256_mask_storeu_epi16(out + r * out_rs + j, lanes, reinterpret_cast<const __m256i&>(narrow));
    }
  }
}

// Blocking: an A micro-panel of 14 x 1024 bf16 (28 KiB) stays in L1, a B block of 1024 x 512 bf16
// (1 MiB) in L2; K <= 1024 is one pass.
constexpr int64_t kKC = 1024, kMC = 168, kNC = 512;

// The probe behind avx512_bf16_rate_ratio: kChains independent accumulators, each instruction waiting only on
// its own chain's previous one, so the loop runs at the instruction's throughput, not its latency.
constexpr int kChains = 12;
template <bool kDot>
__attribute__((noinline)) float rate_loop(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1e-3f * float(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
  const __m512bh xb = _mm512_cvtne2ps_pbh(x, x), yb = _mm512_cvtne2ps_pbh(y, y);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = kDot ? _mm512_dpbf16_ps(acc[i], xb, yb) : _mm512_fmadd_ps(acc[i], x, y);
  }
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i) total = _mm512_add_ps(total, acc[i]);
  return _mm512_reduce_add_ps(total);  // used, so the loop is kept
}

}  // namespace

static double rate_ratio_measured() {
  // Seconds of the fastest of 7 runs of each loop, alternated (a run that the OS interrupts only loses);
  // the first pair also brings the core up to its AVX-512 clock.
  constexpr int64_t kIterations = 4096;
  double best[2] = {1e30, 1e30};
  volatile float sink = 0;
  for (int run = 0; run < 8; ++run)
    for (int dot = 0; dot < 2; ++dot) {
      const auto start = std::chrono::steady_clock::now();
      sink = sink + (dot ? rate_loop<true>(kIterations) : rate_loop<false>(kIterations));
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (run > 0) best[dot] = std::min(best[dot], seconds);
    }
  // One vdpbf16ps does 32 multiply-adds (16 lanes x 2), one FMA 16.
  return (32.0 / best[1]) / (16.0 / best[0]);
}

const GemmKernel<float, uint16_t, float> kAvx512Bf16FromFloat = {
    "avx512_bf16", kMR, kNR, 16, kKC, kMC, kNC, &tile_any_size, &pack_a<float>, &pack_b<float>, &bias_tile_any_size, 2,
    nullptr, &round_rows, &bf16_tile_any_size};
const GemmKernel<BFloat16, uint16_t, float> kAvx512Bf16FromBf16 = {
    "avx512_bf16", kMR, kNR, 16, kKC, kMC, kNC, &tile_any_size, &pack_a<BFloat16>, &pack_b<BFloat16>, &bias_tile_any_size, 2,
    &direct_tile_any_size, &round_rows, &bf16_tile_any_size};

}  // namespace ember::cpu::detail

#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace ember::cpu::detail {

static bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("fma");
}

template <>
const GemmKernel<float, uint16_t, float>* avx512_bf16_kernel<float>() {
  return cpu_has_avx512_bf16() ? &kAvx512Bf16FromFloat : nullptr;
}
template <>
const GemmKernel<BFloat16, uint16_t, float>* avx512_bf16_kernel<BFloat16>() {
  return cpu_has_avx512_bf16() ? &kAvx512Bf16FromBf16 : nullptr;
}
double avx512_bf16_rate_ratio() { return cpu_has_avx512_bf16() ? rate_ratio_measured() : 0.0; }

}  // namespace ember::cpu::detail

#else  // not x86-64 GCC/Clang (or clang 16)

namespace ember::cpu::detail {
template <>
const GemmKernel<float, uint16_t, float>* avx512_bf16_kernel<float>() { return nullptr; }
template <>
const GemmKernel<BFloat16, uint16_t, float>* avx512_bf16_kernel<BFloat16>() { return nullptr; }
double avx512_bf16_rate_ratio() { return 0.0; }
}  // namespace ember::cpu::detail

#endif
