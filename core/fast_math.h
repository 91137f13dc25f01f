// Float e^x and the normal CDF written as plain arithmetic, without calls or branches, so that loops over
// them vectorise (the C library's expf and erfcf are calls that the compiler cannot vectorise).
// float64 keeps the library functions: precision first, gradchecks run in float64.
// EMBER_HD and memcpy for the bit moves, so the same code compiles for CUDA (C++17) as well.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/hd.h"

#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

namespace ember::math {

EMBER_HD inline int32_t bits_of(float x) {
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
EMBER_HD inline float float_of_bits(int32_t i) {
  float x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}

#if !defined(__CUDACC__)
// Sixteen floats (and their bits as int32s) as one value: the GCC / Clang vector extension, where + * < and ?:
// act lane by lane and a cast between the two types moves the bits. One AVX-512 register (two AVX2 ones, four
// SSE ones): CPU loops written on it vectorise whatever the compiler makes of a loop. CPU only.
using Floats16 = float __attribute__((vector_size(64)));
using Ints16 = int32_t __attribute__((vector_size(64)));
inline Ints16 bits_of(Floats16 x) { return (Ints16)x; }
inline Floats16 float_of_bits(Ints16 i) { return (Floats16)i; }
#endif

// e^x: Cody-Waite reduction x = k ln2 + r with |r| <= ln2/2, a degree-7 Taylor polynomial for e^r
// (truncation < 1e-8 relative), then 2^k applied as two factors so that results from subnormal to
// overflow are right. NaN -> NaN, -inf -> 0, +inf -> inf. Max relative error about 1 float ulp
// (tested against std::exp). F is a float or Floats16 (the same steps on each lane: the same bits).
template <typename F>
EMBER_HD inline F exp_approx(F x) {
  const F low = F{} - 110.0f, high = F{} + 90.0f;
  const F xc = x < low ? low : (x > high ? high : x);  // NaN passes through unchanged
  const F shifter = F{} + 12582912.0f;                 // 1.5 * 2^23: adding it rounds to an integer
  const F t = xc * 1.44269504088896341f + shifter;
  const auto k = bits_of(t) - bits_of(shifter);
  const F kf = t - shifter;
  F r = xc - kf * 0.693359375f;  // ln2 split: the high part has few bits, so kf * hi is exact
  r = r - kf * -2.12194440e-4f;
  F p = F{} + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
#if defined(__AVX512F__) && !defined(__CUDACC__)
  // p 2^k in one instruction (vscalefps: one rounding, only where the result is subnormal, as below), not the
  // eight integer and float steps of the two factors: the same bits (tests/core/test_softmax.cpp). (The masked form
  // with every lane set: GCC 12 warns about the plain one's undefined pass-through.)
  if constexpr (sizeof(F) == sizeof(__m512)) return (F)_mm512_maskz_scalef_ps(0xFFFF, (__m512)p, (__m512)kf);
#endif
  const auto k1 = k >> 1, k2 = k - k1;  // k in [-159, 130]: both halves are normal exponents
  return p * float_of_bits((k1 + 127) << 23) * float_of_bits((k2 + 127) << 23);
}
EMBER_HD inline float exp_vec(float x) { return exp_approx(x); }
#if !defined(__CUDACC__)
inline Floats16 exp_vec(Floats16 x) { return exp_approx(x); }
#endif
EMBER_HD inline double exp_vec(double x) { return std::exp(x); }

// Phi(x), the standard normal CDF P(X <= x), to a small *relative* error over the whole float range, for
// GELU (x Phi(x)). With t = 1 / (1 + p z), z = |x| / sqrt 2, p = 0.3275911:
//   Phi(-|x|) = erfc(z) / 2 = [t P(t) / 2] e^(-x^2/2),   Phi(|x|) = 1 - Phi(-|x|)
// where P, degree 9, is fitted to erfc(z) e^(z^2) / t (a smooth function of t in (0, 1]) for the least
// maximum relative error over z in [0, 11] (below 6e-9). Each side is computed without cancellation: Phi
// of a negative x, however small (4e-39 at x = -13), has the relative accuracy of its factors, not the
// absolute accuracy of 1 + erf(x) (the Abramowitz-Stegun erf used before, 1.5e-7 absolute, was 2e-4 relative
// at x = -3.45 and 100% below -5.5; so is PyTorch's float32 GELU). The float rounding of x^2 / 2 passes into
// e^(-x^2/2) as a relative error of about |x^2 / 2| * 6e-8, which sets the bound: under 5e-6 down to x = -13
// (tests/core/test_elementwise.cpp), under 1e-6 for x > -5. No branch or call: loops over it vectorise.
//
// normal_cdf_factor(x) is the bracket, t P(t) / 2, so that Phi(-|x|) = factor * e^(-x^2/2): GELU multiplies
// by the exponential last, once, so that a result in the subnormal range (x < -13.2) is rounded only once.
EMBER_HD inline float normal_cdf_factor(float x) {
  const float z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.3275911f * z);
  float poly = 5.498236057e-02f;
  poly = poly * t - 3.077664661e-01f;
  poly = poly * t + 6.048930974e-01f;
  poly = poly * t - 5.293992293e-01f;
  poly = poly * t + 4.751886341e-01f;
  poly = poly * t - 3.588824825e-02f;
  poly = poly * t + 2.007598883e-01f;
  poly = poly * t + 1.667947328e-01f;
  poly = poly * t + 1.856482640e-01f;
  poly = poly * t + 1.847869605e-01f;
  return 0.5f * t * poly;
}
EMBER_HD inline float normal_cdf(float x) {
  const float lower_tail = normal_cdf_factor(x) * exp_vec(-0.5f * x * x);  // Phi(-|x|)
  return x < 0.0f ? lower_tail : 1.0f - lower_tail;
}
EMBER_HD inline double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }

}  // namespace ember::math
