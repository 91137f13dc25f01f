// What the CPU's element-wise kernels share (core/kernels.h's copy, fill, binary, unary_forward, ...:
// core/cpu/elementwise.cpp, core/cpu/binary.cpp, core/cpu/unary.cpp): a kernel operand as the loops
// of core/cpu/loops.h walk it, and bfloat16 computed in float chunks or looked up in tables.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/cpu/lanes.h"
#include "core/cpu/loops.h"
#include "core/cpu/table_lookup.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/shape.h"
#include "core/unary_math.h"

namespace ember::cpu {

// A kernel's operand (core/kernels.h) as the loops walk it: its strides in bytes.
inline LoopOperand loop_operand(const Strided& t) {
  Strides bytes(t.strides);
  const int64_t size = int64_t(dtype_size(Dtype(t.dtype)));
  for (auto& s : bytes) s *= size;
  return {static_cast<char*>(t.data), bytes};
}

// bfloat16 rows are computed in chunks: widened into float buffers on the stack, run through the same float
// loop as a float32 row (so it vectorises as that one does), and rounded back.
// (widen and narrow: core/cpu/lanes.h.)
constexpr int64_t kWideChunk = 256;

// The float loops a bfloat16 chunk runs through, widened: out = f(x), and g * f'(x, y) into g.
template <typename F>
void apply_widened(const F& f, const BFloat16* in, BFloat16* out, int64_t n) {
  float buffer[kWideChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kWideChunk) {
    const int64_t m = std::min(kWideChunk, n - i0);
    widen(in + i0, buffer, m);
    for (int64_t i = 0; i < m; ++i) buffer[i] = f.f(buffer[i]);
    narrow(buffer, out + i0, m);
  }
}
template <typename F>
void times_derivative(const F& f, float* g, const float* xs, const float* ys, int64_t m) {
  for (int64_t i = 0; i < m; ++i) g[i] = g[i] * f.df(xs[i], ys[i]);
}

// A bfloat16 has 65,536 values, so a function of one alone (a functor without parameters: std::is_empty)
// can be worked out for every input once and then looked up: a gather or 16 loads per 16 elements (whichever
// is faster here: core/cpu/table_lookup.h) instead of, for GELU, some thirty vector operations. The tables
// are made by the same loops as above (the untabled results bit for bit, tests/core/test_bfloat16.cpp) on first
// use: f's values rounded (128 KiB), and f'(v, v) as float (256 KiB; backward reads one saved tensor, x or
// y, and hands it in as both, autograd/ops/unary.cpp).
template <typename F>
inline constexpr bool kTabulated = std::is_empty_v<F>;

template <typename F>
const BFloat16* bf16_values(const F& f) {
  static const std::vector<BFloat16> table = [&f] {
    std::vector<BFloat16> every(65536), values(65537);  // one more: lanes::lookup_store reads 32 bits
    for (size_t i = 0; i < every.size(); ++i) every[i] = BFloat16::from_bits(uint16_t(i));
    apply_widened(f, every.data(), values.data(), 65536);
    return values;
  }();
  return table.data();
}
template <typename F>
const float* bf16_derivatives(const F& f) {
  static const std::vector<float> table = [&f] {
    std::vector<float> every(65536), derivatives(65536, 1.0f);
    for (size_t i = 0; i < every.size(); ++i) every[i] = BFloat16::to_float(uint16_t(i));
    for (int64_t i0 = 0; i0 < 65536; i0 += kWideChunk)
      times_derivative(f, derivatives.data() + i0, every.data() + i0, every.data() + i0, kWideChunk);
    return derivatives;
  }();
  return table.data();
}

}  // namespace ember::cpu
