// Sixteen values as one: math::Floats16 (core/fast_math.h) for float, sixteen doubles for float64. The row
// loops of softmax and attention are written on these (load, +, *, ?:, store), so that they vectorise whatever
// the compiler makes of a scalar loop: one AVX-512 register per Floats16 here, two AVX2 or four SSE ones
// elsewhere. Also e^x per lane, the lanes' total in lane order, and bfloat16 runs of 16 widened to floats or
// rounded from them (round to nearest even, NaN kept: BFloat16's rule on every lane). CPU only.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/bfloat16.h"
#include "core/fast_math.h"

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

// 16 bfloat16 values as floats (exact).
inline math::Floats16 load_widened(const BFloat16* p) {
  Words16 words;
  std::memcpy(&words, p, sizeof words);
  return (math::Floats16)(__builtin_convertvector(words, Unsigned16) << 16);
}
// 16 floats rounded to bfloat16 and stored: BFloat16::round_to_bits on each lane.
inline void store_rounded(BFloat16* p, math::Floats16 v) {
  const Unsigned16 x = (Unsigned16)v;
  const Unsigned16 rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const Unsigned16 quiet_nan = (x >> 16) | 0x0040u;
  const Words16 words = __builtin_convertvector((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded, Words16);
  std::memcpy(p, &words, sizeof words);
}

}  // namespace ember::cpu::lanes
