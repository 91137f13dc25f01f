// Float e^x and erf(x) written as plain arithmetic, without calls or branches, so that loops over
// them vectorise (the C library's expf and erff are calls that the compiler cannot vectorise).
// float64 keeps the library functions: precision first, gradchecks run in float64.
// EMBER_HD and memcpy for the bit moves, so the same code compiles for CUDA (C++17) as well.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/hd.h"

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

// e^x: Cody-Waite reduction x = k ln2 + r with |r| <= ln2/2, a degree-7 Taylor polynomial for e^r
// (truncation < 1e-8 relative), then 2^k applied as two factors so that results from subnormal to
// overflow are right. NaN -> NaN, -inf -> 0, +inf -> inf. Max relative error about 1 float ulp
// (tested against std::exp).
EMBER_HD inline float exp_vec(float x) {
  float xc = x < -110.0f ? -110.0f : (x > 90.0f ? 90.0f : x);  // NaN passes through unchanged
  constexpr float kShifter = 12582912.0f;                      // 1.5 * 2^23: adding it rounds to an integer
  float t = xc * 1.44269504088896341f + kShifter;
  int32_t k = bits_of(t) - bits_of(kShifter);
  float kf = t - kShifter;
  float r = xc - kf * 0.693359375f;  // ln2 split: the high part has few bits, so kf * hi is exact
  r = r - kf * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t k1 = k >> 1, k2 = k - k1;  // k in [-159, 130]: both halves are normal exponents
  return p * float_of_bits((k1 + 127) << 23) * float_of_bits((k2 + 127) << 23);
}
EMBER_HD inline double exp_vec(double x) { return std::exp(x); }

// erf(x) for |x| >= 0.5 from t = 1 / (1 + p |x|) and e^(-x^2) (Abramowitz and Stegun 7.1.26,
// absolute error below 1.5e-7): erf(|x|) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-x^2),
// odd in x. Below 0.5 that difference from 1 would cancel away float digits, so the Taylor series
// 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320) is used (remainder < 2e-8).
// Both are computed and one is selected, which vectorises. `exp_minus_x2` is e^(-x^2), passed in
// because GELU's derivative needs the same value.
EMBER_HD inline float erf_with_exp(float x, float exp_minus_x2) {
  float ax = x < 0.0f ? -x : x;
  float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  float tail = 1.0f - poly * t * exp_minus_x2;
  float x2 = ax * ax;
  float series = -1.0f / 1320.0f;
  series = series * x2 + 1.0f / 216.0f;
  series = series * x2 - 1.0f / 42.0f;
  series = series * x2 + 1.0f / 10.0f;
  series = series * x2 - 1.0f / 3.0f;
  series = series * x2 + 1.0f;
  series = series * ax * 1.1283791670955126f;  // 2 / sqrt(pi)
  float y = ax < 0.5f ? series : tail;
  return x < 0.0f ? -y : y;
}
EMBER_HD inline float erf_vec(float x) { return erf_with_exp(x, exp_vec(-x * x)); }
EMBER_HD inline double erf_vec(double x) { return std::erf(x); }

}  // namespace ember::math
