// CPU copies, fills and in-place accumulation over strided tensors (checked by the ops: core/ops/views.cpp).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/cpu/elementwise.h"

namespace ember::cpu {

Strides broadcast_byte_strides(const Shape& shape, const Strides& strides, int64_t itemsize, const Shape& out_shape) {
  Strides out(out_shape.size(), 0);
  size_t lead = out_shape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    out[lead + d] = shape[d] == 1 ? 0 : strides[d] * itemsize;
  return out;
}

void copy(const Tensor& src, const Tensor& dst) {
  dispatch_storable(dst.dtype(), "copy", [&](auto out_tag) {
    using D = typename decltype(out_tag)::type;
    dispatch_storable(src.dtype(), "copy", [&](auto in_tag) {
      using S = typename decltype(in_tag)::type;
      for_each_row<2>(dst.shape(), {operand(dst), broadcast_operand(src, dst.shape())},
                      [&](auto p, auto s, int64_t n) {
        D* o = reinterpret_cast<D*>(p[0]);
        if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
          const S* in = reinterpret_cast<const S*>(p[1]);
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<D>(in[i]);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<D*>(p[0] + i * s[0]) = static_cast<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
        }
      });
    });
  });
}

void add_into(const Tensor& dst, const Tensor& src, double alpha) {
  const Shape& shape = dst.shape();
  dispatch_storable(dst.dtype(), "add_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;  // bfloat16: summed in float, rounded once
    if constexpr (std::is_same_v<T, bool>) {
      fail("add_: not defined for bool tensors");
    } else {
      C a = static_cast<C>(alpha);
      for_each_row<2>(shape, {operand(dst), broadcast_operand(src, shape)}, [&](auto p, auto s, int64_t n) {
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
          T* o = reinterpret_cast<T*>(p[0]);
          const T* in = reinterpret_cast<const T*>(p[1]);
          for (int64_t i = 0; i < n; ++i) o[i] = T(C(o[i]) + a * C(in[i]));
        } else {
          for (int64_t i = 0; i < n; ++i) {
            T& o = *reinterpret_cast<T*>(p[0] + i * s[0]);
            o = T(C(o) + a * C(*reinterpret_cast<const T*>(p[1] + i * s[1])));
          }
        }
      });
    }
  });
}

void fill(const Tensor& dst, double value) {
  dispatch_storable(dst.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = static_cast<T>(value);
    for_each_row<1>(dst.shape(), {operand(dst)}, [&](auto p, auto s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

void scale(const Tensor& dst, double value) {
  dispatch_real(dst.dtype(), "mul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;  // bfloat16: multiplied in float, rounded once
    const C v = static_cast<C>(value);
    for_each_row<1>(dst.shape(), {operand(dst)}, [&](auto p, auto s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = T(C(o[i]) * v);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          T& o = *reinterpret_cast<T*>(p[0] + i * s[0]);
          o = T(C(o) * v);
        }
      }
    });
  });
}

}  // namespace ember::cpu
