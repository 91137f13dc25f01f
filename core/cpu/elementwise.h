// CPU element-wise kernels: one loop each for unary, unary-backward and binary ops, generic in
// the functor (core/unary_math.h), vectorised on contiguous rows and threaded when large.
#pragma once
#include "core/cpu/loops.h"
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

// out = f(x), a new contiguous tensor (x floating: the op has checked it).
template <typename F>
Tensor map_unary(const F& f, const Tensor& x, const char* op) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_row<2>(x.shape(), {operand(out), operand(x)}, [&](auto p, auto s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* in = reinterpret_cast<const T*>(p[1]);
      if (s[1] == sizeof(T)) {
        for (int64_t i = 0; i < n; ++i) o[i] = f.f(in[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = f.f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      }
    });
  });
  return out;
}

// grad_x = grad_y * f'(x), from the saved input x and output y; all the same shape.
template <typename F>
Tensor map_unary_backward(const F& f, const Tensor& grad, const Tensor& x, const Tensor& y, const char* op) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_row<4>(x.shape(), {operand(out), operand(grad), operand(x), operand(y)},
                    [&](auto p, auto s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      if (s[1] == sizeof(T) && s[2] == sizeof(T) && s[3] == sizeof(T)) {
        const T* g = reinterpret_cast<const T*>(p[1]);
        const T* xs = reinterpret_cast<const T*>(p[2]);
        const T* ys = reinterpret_cast<const T*>(p[3]);
        for (int64_t i = 0; i < n; ++i) o[i] = g[i] * f.df(xs[i], ys[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          T g = *reinterpret_cast<const T*>(p[1] + i * s[1]);
          T xv = *reinterpret_cast<const T*>(p[2] + i * s[2]);
          T yv = *reinterpret_cast<const T*>(p[3] + i * s[3]);
          o[i] = g * f.df(xv, yv);
        }
      }
    });
  });
  return out;
}

// out = f(a, b) with a and b (of one dtype, on the CPU) broadcast together to `shape`: of their
// dtype, or bool for a comparison (math::is_comparison). The op has checked the inputs.
template <typename F>
Tensor map_binary(const F& f, const Tensor& a, const Tensor& b, const Shape& shape, const char* op) {
  constexpr bool same_type = !math::is_comparison<F>;
  Tensor out = Tensor::empty(shape, same_type ? a.dtype() : Dtype::Bool, a.device());
  dispatch_all(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
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
        for (int64_t i = 0; i < n; ++i) o[i] = f.f(x[i], y[i]);
      } else if (s[1] == sizeof(T) && s[2] == 0) {
        T yv = *y;
        for (int64_t i = 0; i < n; ++i) o[i] = f.f(x[i], yv);
      } else if (s[1] == 0 && s[2] == sizeof(T)) {
        T xv = *x;
        for (int64_t i = 0; i < n; ++i) o[i] = f.f(xv, y[i]);
      } else {
        for (int64_t i = 0; i < n; ++i)
          o[i] = f.f(*reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2]));
      }
    });
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
