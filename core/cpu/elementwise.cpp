// The CPU's copies, fills, in-place accumulation and select over strided operands (core/kernels.h's copy,
// fill, add_into, scale and select; the ops have checked them: autograd/ops/views.cpp, autograd/ops/masking.cpp).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/cpu/elementwise.h"

namespace ember::cpu {

void copy(const On&, const Shape& shape, const Strided& dst, const Strided& src) {
  dispatch_storable(Dtype(dst.dtype), "copy", [&](auto out_tag) {
    using D = typename decltype(out_tag)::type;
    dispatch_storable(Dtype(src.dtype), "copy", [&](auto in_tag) {
      using S = typename decltype(in_tag)::type;
      for_each_row<2>(shape, {loop_operand(dst), loop_operand(src)}, [&](auto p, auto s, int64_t n) {
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

void add_into(const On&, const Shape& shape, const Strided& dst, const Strided& src, double alpha) {
  dispatch_storable(Dtype(dst.dtype), "add_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;  // bfloat16: summed in float, rounded once
    if constexpr (std::is_same_v<T, bool>) {
      fail("add_: not defined for bool tensors");
    } else {
      C a = static_cast<C>(alpha);
      for_each_row<2>(shape, {loop_operand(dst), loop_operand(src)}, [&](auto p, auto s, int64_t n) {
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

void fill(const On&, const Shape& shape, const Strided& dst, double value) {
  dispatch_storable(Dtype(dst.dtype), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = static_cast<T>(value);
    for_each_row<1>(shape, {loop_operand(dst)}, [&](auto p, auto s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

void scale(const On&, const Shape& shape, const Strided& dst, double value) {
  dispatch_real(Dtype(dst.dtype), "mul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;  // bfloat16: multiplied in float, rounded once
    const C v = static_cast<C>(value);
    for_each_row<1>(shape, {loop_operand(dst)}, [&](auto p, auto s, int64_t n) {
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

// out[i] = cond[i] ? a[i] : b[i]: values picked as they are (any dtype, bfloat16 too).
void select(const On&, const Shape& shape, const Strided& out, const Strided& cond, const Strided& a,
            const Strided& b) {
  dispatch_storable(Dtype(out.dtype), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_row<4>(shape, {loop_operand(out), loop_operand(cond), loop_operand(a), loop_operand(b)},
                    [&](auto p, auto s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      constexpr int64_t one = sizeof(T);
      if (s[1] == 1 && s[2] == one && s[3] == one) {
        for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
      } else if (s[1] == 1 && s[2] == 0 && s[3] == one) {  // masked_fill: a scalar value
        const T xv = *x;
        for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? xv : y[i];
      } else if (s[1] == 1 && s[2] == one && s[3] == 0) {  // a gradient against zero
        const T yv = *y;
        for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : yv;
      } else {
        for (int64_t i = 0; i < n; ++i)
          o[i] = *reinterpret_cast<const bool*>(p[1] + i * s[1]) ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                                                 : *reinterpret_cast<const T*>(p[3] + i * s[3]);
      }
    });
  });
}

}  // namespace ember::cpu
