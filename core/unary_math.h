// Element-wise math: each op's value f(x) and derivative df(x, y) (y = f(x)) side by side.
// EMBER_HD: the same functor runs in the CPU loop and in the CUDA kernel.
// To add an element-wise op: a functor here, one line in EMBER_UNARY_OPS, its declaration in
// core/ops.h, a test. That is all (docs/adding-an-op.md).
#pragma once
#include <cmath>
#include <type_traits>

#include "core/fast_math.h"
#include "core/hd.h"

namespace ember::math {

struct Neg {
  template <typename T> EMBER_HD T f(T x) const { return -x; }
  template <typename T> EMBER_HD T df(T, T) const { return T(-1); }
};
struct Exp {
  template <typename T> EMBER_HD T f(T x) const { return std::exp(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return y; }  // d/dx e^x = e^x
};
struct Log {
  template <typename T> EMBER_HD T f(T x) const { return std::log(x); }
  template <typename T> EMBER_HD T df(T x, T) const { return T(1) / x; }
};
struct Sqrt {
  template <typename T> EMBER_HD T f(T x) const { return std::sqrt(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return T(0.5) / y; }
};
struct Rsqrt {
  template <typename T> EMBER_HD T f(T x) const { return T(1) / std::sqrt(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return T(-0.5) * y * y * y; }  // -1/2 x^(-3/2)
};
struct Tanh {
  template <typename T> EMBER_HD T f(T x) const { return std::tanh(x); }
  template <typename T> EMBER_HD T df(T, T y) const { return T(1) - y * y; }
};
struct Sigmoid {
  template <typename T> EMBER_HD T f(T x) const { return T(1) / (T(1) + std::exp(-x)); }
  template <typename T> EMBER_HD T df(T, T y) const { return y * (T(1) - y); }
};
struct Relu {
  template <typename T> EMBER_HD T f(T x) const { return x > T(0) ? x : T(0); }
  template <typename T> EMBER_HD T df(T x, T) const { return x > T(0) ? T(1) : T(0); }
};
// GELU, erf form: x * Phi(x), Phi the standard normal CDF. d/dx = Phi(x) + x * phi(x).
// float uses the vectorisable erf_vec / exp_vec (core/fast_math.h, error about 1e-7); float64 the library.
struct Gelu {
  template <typename T> EMBER_HD T f(T x) const { return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2))); }
  template <typename T> EMBER_HD T df(T x, T) const {
    T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
    T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1/sqrt(2 pi)
    return cdf + x * pdf;
  }
  EMBER_HD float f(float x) const { return 0.5f * x * (1.0f + erf_vec(x * float(M_SQRT1_2))); }
  EMBER_HD float df(float x, float) const {
    float e = exp_vec(-0.5f * x * x);  // e^(-(x/sqrt 2)^2): erf's exponential and the pdf's
    float cdf = 0.5f * (1.0f + erf_with_exp(x * float(M_SQRT1_2), e));
    return cdf + x * e * 0.3989422804014327f;
  }
};
// softplus(x) = log(1 + e^x), a smooth relu; d/dx = sigmoid(x). Written to stay finite for large |x|.
struct Softplus {
  template <typename T> EMBER_HD T f(T x) const { return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
  template <typename T> EMBER_HD T df(T x, T) const { return T(1) / (T(1) + std::exp(-x)); }
};
struct Abs {
  template <typename T> EMBER_HD T f(T x) const { return x < T(0) ? -x : x; }
  template <typename T> EMBER_HD T df(T x, T) const { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
};
struct Pow {
  double exponent;
  template <typename T> EMBER_HD T f(T x) const { return std::pow(x, T(exponent)); }
  template <typename T> EMBER_HD T df(T x, T) const { return T(exponent) * std::pow(x, T(exponent - 1)); }
};
struct AddScalar {
  double value;
  template <typename T> EMBER_HD T f(T x) const { return x + T(value); }
  template <typename T> EMBER_HD T df(T, T) const { return T(1); }
};
struct MulScalar {
  double value;
  template <typename T> EMBER_HD T f(T x) const { return x * T(value); }
  template <typename T> EMBER_HD T df(T, T) const { return T(value); }
};

// name, functor, and the inputs the GPU-vs-CPU test draws (low, high: inside the op's domain):
// one line per parameterless op. The list generates each op (core/ops/unary.cpp), its CUDA
// kernels (cuda/unary_kernels.cu), their declarations and stubs (core/cuda_ops.h), and its row
// in the GPU-vs-CPU test (tests/test_cuda.cpp).
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
struct Greater { template <typename T> EMBER_HD bool f(T a, T b) const { return a > b; } };
struct Less { template <typename T> EMBER_HD bool f(T a, T b) const { return a < b; } };

// name, functor: one line per binary op. The lists generate the CUDA kernels
// (cuda/elementwise_kernels.cu), their declarations and stubs (core/cuda_ops.h) and the rows of the
// GPU-vs-CPU test (tests/test_cuda_ops.cpp); the comparisons' ops too (core/ops/binary.cpp: they
// have no gradient). Each arithmetic op's backward is written out in core/ops/binary.cpp.
#define EMBER_ARITHMETIC_OPS(X) \
  X(add, Add)                   \
  X(sub, Sub)                   \
  X(mul, Mul)                   \
  X(div, Div)
#define EMBER_COMPARISON_OPS(X) \
  X(eq, Equal)                  \
  X(gt, Greater)                \
  X(lt, Less)
#define EMBER_BINARY_OPS(X) EMBER_ARITHMETIC_OPS(X) EMBER_COMPARISON_OPS(X)

// True for a comparison functor (its f gives bool): the result of the op is then a bool tensor.
template <typename F>
constexpr bool is_comparison = std::is_same_v<decltype(F{}.f(0.0f, 0.0f)), bool>;

}  // namespace ember::math
