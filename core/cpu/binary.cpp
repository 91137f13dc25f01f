// The CPU's binary kernels (core/kernels.h: binary, add_widens): one loop generic in the functor
// (core/unary_math.h), instantiated for every functor, operands broadcast by stride 0; and the sum of a
// float32 and a bfloat16 operand that widens the bfloat16 one as it reads it.
#include <cstdint>
#include <type_traits>

#include "core/cpu/elementwise.h"

namespace ember::cpu {
namespace {

// out = f(a, b) with a and b (of one dtype) broadcast to `shape`: out of their dtype, or bool for a
// comparison (math::is_comparison). bfloat16 is computed in float, each result rounded once. The op
// has checked the inputs.
template <typename F>
void map_binary(const F& f, const Shape& shape, const Strided& out, const Strided& a, const Strided& b,
                const char* op) {
  constexpr bool same_type = !math::is_comparison<F>;
  dispatch_storable(Dtype(a.dtype), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_type<T>;
    using R = std::conditional_t<same_type, T, bool>;
    if constexpr (std::is_same_v<T, bool> && same_type) {
      fail("{}: arithmetic on bool tensors is not defined", op);
    } else {
    for_each_row<3>(shape, {loop_operand(out), loop_operand(a), loop_operand(b)}, [&](auto p, auto s, int64_t n) {
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
}

// out = f(a, b) for a float32 a and a bfloat16 b broadcast to `shape` (f commutative or a first): float32,
// b widened as it is read (no float32 copy of it).
template <typename F>
void map_binary_widening(const F& f, const Shape& shape, const Strided& out, const Strided& a, const Strided& b) {
  for_each_row<3>(shape, {loop_operand(out), loop_operand(a), loop_operand(b)}, [&](auto p, auto s, int64_t n) {
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
}

}  // namespace

#define EMBER_DEFINE_CPU_BINARY(name, Functor)                                                                    \
  void binary(const On&, const math::Functor& f, const Shape& shape, const Strided& out, const Strided& a,       \
              const Strided& b) {                                                                                 \
    if constexpr (std::is_same_v<math::Functor, math::Add>) {                                                     \
      if (a.dtype != b.dtype) return map_binary_widening(f, shape, out, a, b);                                    \
    }                                                                                                             \
    map_binary(f, shape, out, a, b, #name);                                                                       \
  }
EMBER_BINARY_OPS(EMBER_DEFINE_CPU_BINARY)
#undef EMBER_DEFINE_CPU_BINARY

bool add_widens(const On&) { return true; }

}  // namespace ember::cpu
