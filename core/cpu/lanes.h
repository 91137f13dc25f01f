// Sixteen values as one: math::Floats16 (core/fast_math.h) for float, sixteen doubles for float64. The row
// loops of softmax and attention are written on these (load, +, *, ?:, store), so that they vectorise whatever
// the compiler makes of a scalar loop: one AVX-512 register per Floats16 here, two AVX2 or four SSE ones
// elsewhere. Also e^x per lane, the lanes' total in lane order, bfloat16 runs of 16 widened to floats or
// rounded from them (round to nearest even, NaN kept: BFloat16's rule on every lane), the same for two rows
// side by side (pair-major), and 16 lookups in a table indexed by a bfloat16's bits. CPU only.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/bfloat16.h"
#include "core/fast_math.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ember::cpu::lanes {

constexpr int kLanes = 16;

template <typename T> struct LanesOf;
template <> struct LanesOf<float> { using type = math::Floats16; };
template <> struct LanesOf<double> { using type = double __attribute__((vector_size(kLanes * sizeof(double)))); };
template <typename T> using Lanes = typename LanesOf<T>::type;
using Words16 = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
using Unsigned16 = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));

template <typename T>
inline Lanes<T> load(const T* p) {
  Lanes<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void store(T* p, Lanes<T> v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
inline Lanes<T> splat(T value) {
  return Lanes<T>{} + value;
}

// e^x on each lane: exp_vec's vector form for float (the same bits as the scalar one), std::exp for float64.
inline math::Floats16 exp_lanes(math::Floats16 x) { return math::exp_vec(x); }
inline Lanes<double> exp_lanes(Lanes<double> x) {
  for (int k = 0; k < kLanes; ++k) x[k] = std::exp(x[k]);
  return x;
}

// lanes[0] + lanes[1] + ... + lanes[15], in that order.
template <typename T>
inline T lane_total(Lanes<T> lanes) {
  T sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

// The totals of 16 vectors at once: lane j of the result is the total of v[j]'s lanes. Four rounds of
// pairing, each adding the halves of blocks of lanes (8, 4, 2, 1 wide) of two vectors into one, where
// lane_total would take 16 dependent adds per vector. The sums go in that tree's order, not lane_total's.
// The tree leaves vector j's total in lane bitreverse(j), so it is fed the vectors in that order.
template <typename T>
inline Lanes<T> lane_totals(const Lanes<T> (&v)[kLanes]) {
  constexpr int kBitReversed[kLanes] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  Lanes<T> x[kLanes];
  for (int k = 0; k < kLanes; ++k) x[k] = v[kBitReversed[k]];
  for (int k = 0; k < 8; ++k)  // blocks of 8: [a0-7 b0-7] + [a8-15 b8-15]
    x[k] = __builtin_shufflevector(x[2 * k], x[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(x[2 * k], x[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int k = 0; k < 4; ++k)  // blocks of 4
    x[k] = __builtin_shufflevector(x[2 * k], x[2 * k + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           __builtin_shufflevector(x[2 * k], x[2 * k + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int k = 0; k < 2; ++k)  // blocks of 2
    x[k] = __builtin_shufflevector(x[2 * k], x[2 * k + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           __builtin_shufflevector(x[2 * k], x[2 * k + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  return __builtin_shufflevector(x[0], x[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
         __builtin_shufflevector(x[0], x[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}

// 16 bfloat16 values as floats (exact).
inline math::Floats16 load_widened(const BFloat16* p) {
  Words16 words;
  std::memcpy(&words, p, sizeof words);
  return (math::Floats16)(__builtin_convertvector(words, Unsigned16) << 16);
}
// BFloat16::round_to_bits on each lane: 16 floats' bfloat16 bits, in the low half of each lane.
inline Unsigned16 rounded_bits(math::Floats16 v) {
  const Unsigned16 x = (Unsigned16)v;
  const Unsigned16 rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const Unsigned16 quiet_nan = (x >> 16) | 0x0040u;
  return (x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
}
// 16 floats rounded to bfloat16 and stored.
inline void store_rounded(BFloat16* p, math::Floats16 v) {
  const Words16 words = __builtin_convertvector(rounded_bits(v), Words16);
  std::memcpy(static_cast<void*>(p), &words, sizeof words);  // BFloat16 is a class: memcpy its bytes
}

// Pair-major runs (two rows side by side, as cpu::gemm_bf16_pair_major reads them): 16 pairs
// (first[k], second[k]) at p[2k], p[2k + 1]. Stored rounded, and loaded widened (exact).
inline void store_rounded_pairs(BFloat16* p, math::Floats16 first, math::Floats16 second) {
  const Unsigned16 pairs = rounded_bits(first) | (rounded_bits(second) << 16);
  std::memcpy(static_cast<void*>(p), &pairs, sizeof pairs);
}
// 16 pairs from two runs of 16 bfloat16.
inline void store_pairs(BFloat16* p, const BFloat16* first, const BFloat16* second) {
  Words16 a, b;
  std::memcpy(&a, first, sizeof a);
  std::memcpy(&b, second, sizeof b);
  const Unsigned16 pairs = __builtin_convertvector(a, Unsigned16) | (__builtin_convertvector(b, Unsigned16) << 16);
  std::memcpy(static_cast<void*>(p), &pairs, sizeof pairs);
}
inline void load_widened_pairs(const BFloat16* p, math::Floats16& first, math::Floats16& second) {
  Unsigned16 pairs;
  std::memcpy(&pairs, p, sizeof pairs);
  first = (math::Floats16)(pairs << 16);
  second = (math::Floats16)(pairs & 0xFFFF0000u);
}

// Tables indexed by a bfloat16's bits (core/cpu/elementwise.h): 16 keys looked up at once, one gather
// instruction where AVX-512 has it, or 16 scalar loads (the faster on some cores: core/cpu/table_lookup.h).
// The bfloat16 table must have 65,537 entries: a gather reads 32 bits, so key 0xFFFF reads one entry past the last.
inline math::Floats16 lookup_scalar(const float* table, const BFloat16* keys) {
  alignas(64) float values[kLanes];
  for (int k = 0; k < kLanes; ++k) values[k] = table[keys[k].bits];
  return load(values);
}
inline void lookup_store_scalar(const BFloat16* table, const BFloat16* keys, BFloat16* out) {
  for (int k = 0; k < kLanes; ++k) out[k] = table[keys[k].bits];
}
inline math::Floats16 lookup(const float* table, const BFloat16* keys) {
#if defined(__AVX512F__)
  // (The masked forms with every lane set: GCC 12 warns about the plain ones' undefined pass-through.)
  const __m512i index = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys)));
  return (math::Floats16)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, index, table, 4);
#else
  return lookup_scalar(table, keys);
#endif
}
inline void lookup_store(const BFloat16* table, const BFloat16* keys, BFloat16* out) {
#if defined(__AVX512F__)
  const __m512i index = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys)));
  const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, index, table, 2);  // entry in the low half
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_maskz_cvtepi32_epi16(0xFFFF, words));
#else
  lookup_store_scalar(table, keys, out);
#endif
}

}  // namespace ember::cpu::lanes

namespace ember::cpu {

// n bfloat16 widened to float (exact), and n floats rounded to bfloat16 (nearest even, NaN kept): whole
// rows, 16 at a time, then the last n % 16 one by one.
// NOTE: the 16-wide part ends at `whole`, worked out before the loops; the tail loop starts there and
// runs fewer than 16 times. (A vector loop tested `i + 16 <= n` and the tail went on from wherever it
// stopped: GCC 13, inlining both into apply_widened<Gelu>, warned that the tail's count could reach
// 2^62 iterations, past any array: -Waggressive-loop-optimizations.)
inline int64_t whole_lanes(int64_t n) { return n - n % lanes::kLanes; }
inline void widen(const BFloat16* in, float* out, int64_t n) {
  const int64_t whole = whole_lanes(n);
  for (int64_t i = 0; i < whole; i += lanes::kLanes) lanes::store(out + i, lanes::load_widened(in + i));
  for (int64_t i = whole; i < n; ++i) out[i] = float(in[i]);
}
inline void narrow(const float* in, BFloat16* out, int64_t n) {
  const int64_t whole = whole_lanes(n);
  for (int64_t i = 0; i < whole; i += lanes::kLanes) lanes::store_rounded(out + i, lanes::load(in + i));
  for (int64_t i = whole; i < n; ++i) out[i] = BFloat16(in[i]);
}

}  // namespace ember::cpu
