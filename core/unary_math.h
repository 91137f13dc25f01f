// Element-wise math: each op's value f(x) and derivative df(x, y) (y = f(x)) side by side.
// EMBER_HD: the same functor runs in the CPU loop and in the CUDA kernel.
// Each functor also says what df reads (`reads`): backward keeps only that, the input, the output or neither.
// To add an element-wise op: a functor here, one line in EMBER_UNARY_OPS, its declaration in
// autograd/ops.h, a test. That is all (docs/adding-an-op.md).
#pragma once
#include <cmath>
#include <type_traits>

#include "core/fast_math.h"
#include "core/hd.h"

namespace ember::math {

// What a derivative df(x, y) reads, so that backward saves only that (autograd/ops/unary.cpp): holding the
// input or the output of every element-wise op until backward is memory the graph need not keep.
enum class Reads { Nothing, Input, Output };

struct Neg {
  static constexpr Reads reads = Reads::Nothing;
  template <typename T> EMBER_HD T f(T x) const { return -x; }
  template <typename T> EMBER_HD T df(T, T) const { return T(-1); }
};
struct Exp {
  static constexpr Reads reads = Reads::Output;
  template <typename T> EMBER_HD T f(T x) const { return std::exp(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return y; }  // d/dx e^x = e^x
};
struct Log {
  static constexpr Reads reads = Reads::Input;
  template <typename T> EMBER_HD T f(T x) const { return std::log(x); }
  template <typename T> EMBER_HD T df(T x, T) const { return T(1) / x; }
};
struct Sqrt {
  static constexpr Reads reads = Reads::Output;
  template <typename T> EMBER_HD T f(T x) const { return std::sqrt(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return T(0.5) / y; }
};
struct Rsqrt {
  static constexpr Reads reads = Reads::Output;
  template <typename T> EMBER_HD T f(T x) const { return T(1) / std::sqrt(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return T(-0.5) * y * y * y; }  // -1/2 x^(-3/2)
};
struct Tanh {
  static constexpr Reads reads = Reads::Output;
  template <typename T> EMBER_HD T f(T x) const { return std::tanh(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return T(1) - y * y; }
};
struct Sigmoid {
  static constexpr Reads reads = Reads::Output;
  template <typename T> EMBER_HD T f(T x) const { return T(1) / (T(1) + std::exp(-x)); }
  template <typename T> EMBER_HD T df(T, T y) const { return y * (T(1) - y); }
};
struct Relu {
  static constexpr Reads reads = Reads::Input;
  template <typename T> EMBER_HD T f(T x) const { return x > T(0) ? x : T(0); }
  template <typename T> EMBER_HD T df(T x, T) const { return x > T(0) ? T(1) : T(0); }
};
// GELU, erf form: x * Phi(x), Phi the standard normal CDF. d/dx = Phi(x) + x * phi(x).
// float uses the vectorisable normal CDF and exp_vec (core/fast_math.h: relative error under 5e-6 wherever
// the result is a normal float, also in the tail x << 0 where gelu(x) is tiny); float64 the library's erfc.
// Infinite x gives what PyTorch's gives: gelu(inf) = inf, gelu(-inf) = NaN (-inf * 0), gelu'(+-inf) = NaN.
struct Gelu {
  static constexpr Reads reads = Reads::Input;
  template <typename T> EMBER_HD T f(T x) const { return x * normal_cdf(x); }
  template <typename T> EMBER_HD T df(T x, T) const {
    T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1/sqrt(2 pi)
    return normal_cdf(x) + x * pdf;
  }
  // With c = normal_cdf_factor(x) and e = e^(-x^2/2), Phi(-|x|) = c e and phi(x) = e / sqrt(2 pi):
  //   x < 0:  gelu = (x c) e          gelu' = (c + x / sqrt(2 pi)) e
  //   x >= 0: gelu = x (1 - c e)      gelu' = 1 + (x / sqrt(2 pi) - c) e
  // e (subnormal for x < -13.2) is the last factor: one rounding there.
  EMBER_HD float f(float x) const {
    const float c = normal_cdf_factor(x), e = exp_vec(-0.5f * x * x);
    return x < 0.0f ? (x * c) * e : x * (1.0f - c * e);
  }
  EMBER_HD float df(float x, float) const {
    const float c = normal_cdf_factor(x), e = exp_vec(-0.5f * x * x), xp = x * 0.3989422804014327f;
    return x < 0.0f ? (c + xp) * e : 1.0f + (xp - c) * e;
  }
};
// softplus(x) = log(1 + e^x), a smooth relu; d/dx = sigmoid(x). Written to stay finite for large |x|.
struct Softplus {
  static constexpr Reads reads = Reads::Input;
  template <typename T> EMBER_HD T f(T x) const { return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
  template <typename T> EMBER_HD T df(T x, T) const { return T(1) / (T(1) + std::exp(-x)); }
};
struct Abs {
  static constexpr Reads reads = Reads::Input;
  template <typename T> EMBER_HD T f(T x) const { return x < T(0) ? -x : x; }
  template <typename T> EMBER_HD T df(T x, T) const { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
};
// x^e for a scalar exponent e, with PyTorch's conventions (std::pow's, IEEE 754): 0^0 = 1, 0^e = 0 for
// e > 0 and inf for e < 0 (-inf at x = -0 for an odd negative integer e); a negative x to an integer power
// keeps the sign rule ((-2)^3 = -8), to a fractional one gives NaN. d/dx = e x^(e-1), except that e = 0
// gives 0 everywhere (x^0 is the constant 1), also at x = 0 where e x^(e-1) would be 0 * inf = NaN. At
// x = 0 the rest follows e x^(e-1): 1 for e = 1, 0 for e > 1, inf for 0 < e < 1, -inf for e < 0.
// NOTE: at x = -0, PyTorch computes e = 0.5 as sqrt, giving -0 and -inf where std::pow gives 0 and inf.
struct Pow {
  static constexpr Reads reads = Reads::Input;
  double exponent;
  template <typename T> EMBER_HD T f(T x) const { return std::pow(x, T(exponent)); }
  template <typename T> EMBER_HD T df(T x, T) const {
    return exponent == 0 ? T(0) : T(exponent) * std::pow(x, T(exponent - 1));
  }
};
struct AddScalar {
  static constexpr Reads reads = Reads::Nothing;
  double value;
  template <typename T> EMBER_HD T f(T x) const { return x + T(value); }
  template <typename T> EMBER_HD T df(T, T) const { return T(1); }
};
struct MulScalar {
  static constexpr Reads reads = Reads::Nothing;
  double value;
  template <typename T> EMBER_HD T f(T x) const { return x * T(value); }
  template <typename T> EMBER_HD T df(T, T) const { return T(value); }
};

// name, functor, and the inputs the GPU-vs-CPU test draws (low, high: inside the op's domain):
// one line per parameterless op. The list generates each op (autograd/ops/unary.cpp), its CUDA
// kernels (cuda/unary_kernels.cu), their declarations and stubs (core/cuda_ops.h), and its row
// in the GPU-vs-CPU test (tests/cuda/test_cuda.cpp).
#define EMBER_UNARY_OPS(X)       \
  X(neg, Neg, -3, 3)             \
  X(exp, Exp, -3, 3)             \
  X(log, Log, 0.1, 3)            \
  X(sqrt, Sqrt, 0.1, 3)          \
  X(rsqrt, Rsqrt, 0.1, 3)        \
  X(tanh, Tanh, -3, 3)           \
  X(sigmoid, Sigmoid, -3, 3)     \
  X(relu, Relu, -3, 3)           \
  X(gelu, Gelu, -3, 3)           \
  X(softplus, Softplus, -30, 30) \
  X(abs, Abs, -3, 3)
// The ops whose functor takes a parameter (pow(x, p), x + c, x * c): their CUDA kernels come from
// this list; their ops and test rows are written out (each needs its parameter).
#define EMBER_UNARY_PARAM_OPS(X) \
  X(pow, Pow)                    \
  X(add_scalar, AddScalar)       \
  X(mul_scalar, MulScalar)

// Binary ops: f(a, b). Arithmetic returns the inputs' type, a comparison bool.
struct Add { template <typename T> EMBER_HD T f(T a, T b) const { return a + b; } };
struct Sub { template <typename T> EMBER_HD T f(T a, T b) const { return a - b; } };
struct Mul { template <typename T> EMBER_HD T f(T a, T b) const { return a * b; } };
struct Div { template <typename T> EMBER_HD T f(T a, T b) const { return a / b; } };
struct Equal { template <typename T> EMBER_HD bool f(T a, T b) const { return a == b; } };
struct NotEqual { template <typename T> EMBER_HD bool f(T a, T b) const { return a != b; } };  // NaN != NaN
struct Greater { template <typename T> EMBER_HD bool f(T a, T b) const { return a > b; } };
struct GreaterEqual { template <typename T> EMBER_HD bool f(T a, T b) const { return a >= b; } };
struct Less { template <typename T> EMBER_HD bool f(T a, T b) const { return a < b; } };
struct LessEqual { template <typename T> EMBER_HD bool f(T a, T b) const { return a <= b; } };
// Logical ops take bool operands (autograd/ops/binary.cpp converts others first: nonzero is true).
struct LogicalAnd { template <typename T> EMBER_HD bool f(T a, T b) const { return bool(a) && bool(b); } };
struct LogicalOr { template <typename T> EMBER_HD bool f(T a, T b) const { return bool(a) || bool(b); } };
struct LogicalXor { template <typename T> EMBER_HD bool f(T a, T b) const { return bool(a) != bool(b); } };

// name, functor: one line per binary op. The lists generate the CUDA kernels
// (cuda/elementwise_kernels.cu), their declarations and stubs (core/cuda_ops.h) and the rows of the
// GPU-vs-CPU test (tests/cuda/test_cuda_ops.cpp); the comparisons' and logical ops' ops too
// (autograd/ops/binary.cpp: they have no gradient). Each arithmetic op's backward is written out in
// autograd/ops/binary.cpp.
#define EMBER_ARITHMETIC_OPS(X) \
  X(add, Add)                   \
  X(sub, Sub)                   \
  X(mul, Mul)                   \
  X(div, Div)
#define EMBER_COMPARISON_OPS(X) \
  X(eq, Equal)                  \
  X(ne, NotEqual)               \
  X(gt, Greater)                \
  X(ge, GreaterEqual)           \
  X(lt, Less)                   \
  X(le, LessEqual)
#define EMBER_LOGICAL_OPS(X) \
  X(logical_and, LogicalAnd) \
  X(logical_or, LogicalOr)   \
  X(logical_xor, LogicalXor)
#define EMBER_BINARY_OPS(X) EMBER_ARITHMETIC_OPS(X) EMBER_COMPARISON_OPS(X) EMBER_LOGICAL_OPS(X)

// True for a comparison functor (its f gives bool): the result of the op is then a bool tensor.
template <typename F>
constexpr bool is_comparison = std::is_same_v<decltype(F{}.f(0.0f, 0.0f)), bool>;

}  // namespace ember::math
