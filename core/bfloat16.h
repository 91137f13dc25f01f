// bfloat16: the top 16 bits of a float32 (sign, 8-bit exponent, 7-bit mantissa), and exact conversions both ways.
//
//   float32   s eeeeeeee mmmmmmm mmmmmmmmmmmmmmmm
//   bfloat16  s eeeeeeee mmmmmmm                    (the same range, 8 significant bits instead of 24)
//
// bfloat16 -> float32 appends 16 zero bits: exact. float32 -> bfloat16 rounds to nearest, ties to
// even (RNE), on the bits: add 0x7FFF plus the lowest kept bit, then drop the low 16 bits. That one
// addition carries into the exponent when the mantissa overflows (so the largest values round up to
// Inf, as IEEE rounding says), works unchanged for subnormals (they are kept, not flushed), and
// keeps Inf as Inf. A NaN is kept a NaN of the same sign with its top payload bits, made quiet, so
// that the addition cannot turn it into Inf. float64 -> bfloat16 goes through float32 rounded to
// odd, which makes the two roundings equal one correct rounding.
// C++17 and host + device (EMBER_HD): the CUDA files include it too.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace ember {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  EMBER_HD explicit BFloat16(float value) : bits(round_to_bits(value)) {}
  EMBER_HD explicit BFloat16(double value) : bits(round_to_bits(value)) {}
  template <typename I, typename = decltype(static_cast<double>(I()))>
  EMBER_HD explicit BFloat16(I value) : BFloat16(static_cast<double>(value)) {}
  EMBER_HD static BFloat16 from_bits(uint16_t bits) {
    BFloat16 b;
    b.bits = bits;
    return b;
  }
  EMBER_HD operator float() const { return to_float(bits); }

  EMBER_HD static float to_float(uint16_t bits) {
    uint32_t wide = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &wide, sizeof value);
    return value;
  }
  // Round to nearest even; NaN stays NaN (quiet, same sign), +-Inf stays +-Inf.
  // NOTE: written without a branch (a select), so that loops of conversions vectorise.
  EMBER_HD static uint16_t round_to_bits(float value) {
    uint32_t x;
    std::memcpy(&x, &value, sizeof x);
    const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (x >> 16) | 0x0040u;  // NaN: set the quiet bit
    return uint16_t((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
  EMBER_HD static uint16_t round_to_bits(double value) { return round_to_bits(float_rounded_to_odd(value)); }

  // value rounded to float32 toward zero, its last bit set when that was inexact ("round to odd"):
  // float32 keeps 16 more bits than bfloat16, so rounding this to bfloat16 is the correct rounding of value.
  EMBER_HD static float float_rounded_to_odd(double value) {
    float f = static_cast<float>(value);
    if (!(value == value) || static_cast<double>(f) == value) return f;  // NaN, or exact
    uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    double magnitude = value < 0 ? -value : value;
    double f_magnitude = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
    if (f_magnitude > magnitude) x -= 1;  // one step toward zero (also from Inf down to the largest float)
    x |= 1u;
    std::memcpy(&f, &x, sizeof f);
    return f;
  }
};

static_assert(sizeof(BFloat16) == 2, "bfloat16 is two bytes");

// The type a kernel computes an element type in: float for bfloat16 (loaded exactly, the result rounded
// once when stored), the type itself otherwise. Here, not in core/dtype.h, so that the CUDA files use it too.
template <typename T> struct ComputeType { using type = T; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <typename T> using compute_type = typename ComputeType<T>::type;

}  // namespace ember
