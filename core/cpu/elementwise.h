// CPU element-wise kernels: one loop each for unary, unary-backward and binary ops, generic in
// the functor (core/unary_math.h), vectorised on contiguous rows and threaded when large.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/cpu/lanes.h"
#include "core/cpu/loops.h"
#include "core/cpu/table_lookup.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/unary_math.h"

namespace ember::cpu {

inline LoopOperand operand(const Tensor& t) {
  Strides bytes(t.strides());
  for (auto& s : bytes) s *= dtype_size(t.dtype());
  return {static_cast<char*>(t.raw_data()), bytes};
}
inline LoopOperand broadcast_operand(const Tensor& t, const Shape& out_shape) {
  return {static_cast<char*>(t.raw_data()),
          broadcast_byte_strides(t.shape(), t.strides(), dtype_size(t.dtype()), out_shape)};
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
// y, and hands it in as both, core/ops/unary.cpp).
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

// out = f(x), a new contiguous tensor (x float32, float64 or bfloat16: the op has checked it). A
// bfloat16 x is computed in float and each result rounded once (compute_type), or looked up (above).
template <typename F>
Tensor map_unary(const F& f, const Tensor& x, const char* op) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_real(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    for_each_row<2>(x.shape(), {operand(out), operand(x)}, [&](auto p, auto s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* in = reinterpret_cast<const T*>(p[1]);
      if constexpr (std::is_same_v<T, BFloat16> && kTabulated<F>) {
        const BFloat16* values = bf16_values(f);
        int64_t i = 0;
        if (s[1] == sizeof(T) && table_lookup() == TableLookup::Gather)
          for (; i + lanes::kLanes <= n; i += lanes::kLanes) lanes::lookup_store(values, in + i, o + i);
        // (Scalar: this loop alone, the one table_lookup() times against the gather.)
        for (; i < n; ++i) o[i] = values[reinterpret_cast<const T*>(p[1] + i * s[1])->bits];
        return;
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        if (s[1] == sizeof(T)) {
          apply_widened(f, in, o, n);
          return;
        }
      }
      if (s[1] == sizeof(T)) {
        for (int64_t i = 0; i < n; ++i) o[i] = T(f.f(C(in[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = T(f.f(C(*reinterpret_cast<const T*>(p[1] + i * s[1]))));
      }
    });
  });
  return out;
}

// grad_x = grad_y * f'(x), from the saved input x and output y; all the same shape and dtype.
template <typename F>
Tensor map_unary_backward(const F& f, const Tensor& grad, const Tensor& x, const Tensor& y, const char* op) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_real(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    for_each_row<4>(x.shape(), {operand(out), operand(grad), operand(x), operand(y)},
                    [&](auto p, auto s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (s[1] == sizeof(T) && s[2] == sizeof(T) && s[3] == sizeof(T)) {
          const T* grads = reinterpret_cast<const T*>(p[1]);
          const T* saved = reinterpret_cast<const T*>(p[2]);
          if constexpr (kTabulated<F>) {
            if (p[3] == p[2]) {  // g f'(saved), f' looked up: one pass, 16 at a time
              const float* derivatives = bf16_derivatives(f);
              int64_t i = 0;
              if (table_lookup() == TableLookup::Gather)
                for (; i + lanes::kLanes <= n; i += lanes::kLanes)
                  lanes::store_rounded(o + i, lanes::load_widened(grads + i) * lanes::lookup(derivatives, saved + i));
              else
                for (; i + lanes::kLanes <= n; i += lanes::kLanes)
                  lanes::store_rounded(o + i, lanes::load_widened(grads + i) * lanes::lookup_scalar(derivatives, saved + i));
              for (; i < n; ++i) o[i] = T(float(grads[i]) * derivatives[saved[i].bits]);
              return;
            }
          }
          float g[kWideChunk], xs[kWideChunk], ys[kWideChunk];
          for (int64_t i0 = 0; i0 < n; i0 += kWideChunk) {
            const int64_t m = std::min(kWideChunk, n - i0);
            widen(grads + i0, g, m);
            widen(saved + i0, xs, m);
            if (p[3] != p[2]) widen(reinterpret_cast<const T*>(p[3]) + i0, ys, m);
            times_derivative(f, g, xs, p[3] != p[2] ? ys : xs, m);
            narrow(g, o + i0, m);
          }
          return;
        }
      }
      if (s[1] == sizeof(T) && s[2] == sizeof(T) && s[3] == sizeof(T)) {
        const T* g = reinterpret_cast<const T*>(p[1]);
        const T* xs = reinterpret_cast<const T*>(p[2]);
        const T* ys = reinterpret_cast<const T*>(p[3]);
        for (int64_t i = 0; i < n; ++i) o[i] = T(C(g[i]) * f.df(C(xs[i]), C(ys[i])));
      } else {
        for (int64_t i = 0; i < n; ++i) {
          C g = C(*reinterpret_cast<const T*>(p[1] + i * s[1]));
          C xv = C(*reinterpret_cast<const T*>(p[2] + i * s[2]));
          C yv = C(*reinterpret_cast<const T*>(p[3] + i * s[3]));
          o[i] = T(g * f.df(xv, yv));
        }
      }
    });
  });
  return out;
}

// out = f(a, b) with a and b (of one dtype, on the CPU) broadcast together to `shape`: of their
// dtype, or bool for a comparison (math::is_comparison). bfloat16 is computed in float, each result
// rounded once. The op has checked the inputs.
template <typename F>
Tensor map_binary(const F& f, const Tensor& a, const Tensor& b, const Shape& shape, const char* op) {
  constexpr bool same_type = !math::is_comparison<F>;
  Tensor out = Tensor::empty(shape, same_type ? a.dtype() : Dtype::Bool, a.device());
  dispatch_storable(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    using R = std::conditional_t<same_type, T, bool>;
    if constexpr (std::is_same_v<T, bool> && same_type) {
      fail("{}: arithmetic on bool tensors is not defined", op);
    } else {
    for_each_row<3>(shape, {operand(out), broadcast_operand(a, shape), broadcast_operand(b, shape)},
                    [&](auto p, auto s, int64_t n) {
      R* o = reinterpret_cast<R*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      const T* y = reinterpret_cast<const T*>(p[2]);
      if (s[1] == sizeof(T) && s[2] == sizeof(T)) {
        for (int64_t i = 0; i < n; ++i) o[i] = R(f.f(C(x[i]), C(y[i])));
      } else if (s[1] == sizeof(T) && s[2] == 0) {
        C yv = C(*y);
        for (int64_t i = 0; i < n; ++i) o[i] = R(f.f(C(x[i]), yv));
      } else if (s[1] == 0 && s[2] == sizeof(T)) {
        C xv = C(*x);
        for (int64_t i = 0; i < n; ++i) o[i] = R(f.f(xv, C(y[i])));
      } else {
        for (int64_t i = 0; i < n; ++i)
          o[i] = R(f.f(C(*reinterpret_cast<const T*>(p[1] + i * s[1])), C(*reinterpret_cast<const T*>(p[2] + i * s[2]))));
      }
    });
    }
  });
  return out;
}

// out = f(a, b) for a float32 a and a bfloat16 b broadcast to `shape` (f commutative or a first): float32,
// b widened as it is read (no float32 copy of it).
template <typename F>
Tensor map_binary_widening(const F& f, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, Dtype::Float32, a.device());
  for_each_row<3>(shape, {operand(out), broadcast_operand(a, shape), broadcast_operand(b, shape)},
                  [&](auto p, auto s, int64_t n) {
    float* o = reinterpret_cast<float*>(p[0]);
    if (s[1] == sizeof(float) && s[2] == sizeof(BFloat16)) {
      const float* x = reinterpret_cast<const float*>(p[1]);
      const BFloat16* y = reinterpret_cast<const BFloat16*>(p[2]);
      for (int64_t i = 0; i < n; ++i) o[i] = f.f(x[i], float(y[i]));
    } else {
      for (int64_t i = 0; i < n; ++i)
        o[i] = f.f(*reinterpret_cast<const float*>(p[1] + i * s[1]), float(*reinterpret_cast<const BFloat16*>(p[2] + i * s[2])));
    }
  });
  return out;
}

// The ops have checked the operands (device, dtype, broadcasting: core/ops/views.cpp).
// dst = src (src broadcast to dst's shape), converting the element type; dst may be strided.
void copy(const Tensor& src, const Tensor& dst);
// dst += alpha * src (src broadcast to dst's shape); same dtype.
void add_into(const Tensor& dst, const Tensor& src, double alpha);
void fill(const Tensor& dst, double value);
void scale(const Tensor& dst, double value);

}  // namespace ember::cpu
