// Every element-wise math op, one row each, generated from the lists of core/unary_math.h
// (EMBER_UNARY_OPS and EMBER_UNARY_PARAM_OPS): a test that walks every_unary_op() covers an op
// from the commit that adds its line there; no test keeps its own list to forget it in.
#pragma once
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "core/unary_math.h"

namespace ember::testing {

struct UnaryCase {
  const char* name;  // the op, as its autograd node and its errors name it
  std::function<Tensor(const Tensor&)> op;
  math::Reads reads;  // what its derivative reads: its backward keeps only that (autograd/ops/unary.cpp)
  double low, high;   // inputs inside the op's domain
};

// The parameter of the ops that take one (pow's exponent, the scalar added or multiplied): 1.5 is a
// fractional power, defined on the positive inputs those rows draw.
inline constexpr double kUnaryParam = 1.5;

inline std::vector<UnaryCase> every_unary_op() {
#define EMBER_UNARY_ROW(name, Functor, low, high) \
  {#name, [](const Tensor& x) { return ember::name(x); }, math::Functor::reads, low, high},
#define EMBER_UNARY_PARAM_ROW(name, Functor) \
  {#name, [](const Tensor& x) { return ember::name(x, kUnaryParam); }, math::Functor::reads, 0.1, 3},
  return {EMBER_UNARY_OPS(EMBER_UNARY_ROW) EMBER_UNARY_PARAM_OPS(EMBER_UNARY_PARAM_ROW)};
#undef EMBER_UNARY_ROW
#undef EMBER_UNARY_PARAM_ROW
}

}  // namespace ember::testing
