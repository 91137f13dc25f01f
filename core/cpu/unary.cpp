// The CPU's unary kernels (core/kernels.h: unary_forward, unary_backward), one loop each generic in the
// functor (core/unary_math.h), instantiated for every functor: vectorised on contiguous rows, threaded
// when large, bfloat16 through the tables of core/cpu/elementwise.h where the functor has no parameter.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cpu/elementwise.h"

namespace ember::cpu {
namespace {

// out = f(x) over `shape` (x float32, float64 or bfloat16, any strides: the op has checked it). A
// bfloat16 x is computed in float and each result rounded once (compute_type), or looked up (above).
template <typename F>
void map_unary(const F& f, const Shape& shape, const Strided& out, const Strided& x, const char* op) {
  dispatch_real(Dtype(x.dtype), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    for_each_row<2>(shape, {loop_operand(out), loop_operand(x)}, [&](auto p, auto s, int64_t n) {
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
}

// out = grad_y * f'(x), from the saved input x and output y; all the same shape and dtype.
template <typename F>
void map_unary_backward(const F& f, const Shape& shape, const Strided& out, const Strided& grad, const Strided& x,
                        const Strided& y, const char* op) {
  dispatch_real(Dtype(x.dtype), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    for_each_row<4>(shape, {loop_operand(out), loop_operand(grad), loop_operand(x), loop_operand(y)},
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
}

}  // namespace

#define EMBER_DEFINE_CPU_UNARY(name, Functor, ...)                                                                \
  void unary_forward(const On&, const math::Functor& f, const Shape& shape, const Strided& y, const Strided& x) { \
    map_unary(f, shape, y, x, #name);                                                                             \
  }                                                                                                               \
  void unary_backward(const On&, const math::Functor& f, const Shape& shape, const Strided& grad_x,               \
                      const Strided& grad, const Strided& x, const Strided& y) {                                  \
    map_unary_backward(f, shape, grad_x, grad, x, y, #name);                                                      \
  }
EMBER_UNARY_OPS(EMBER_DEFINE_CPU_UNARY)
EMBER_UNARY_PARAM_OPS(EMBER_DEFINE_CPU_UNARY)
#undef EMBER_DEFINE_CPU_UNARY

}  // namespace ember::cpu
