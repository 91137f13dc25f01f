// Element-wise math ops. Forward: y = f(x). Backward: dx = dy * f'(x, y), one fused pass.
// The formulas live in core/unary_math.h; this file only wires them into autograd.
#include "autograd/node.h"
#include "core/cpu/elementwise.h"
#include "core/ops.h"
#include "core/unary_math.h"

namespace ember {
namespace {

template <typename F>
Tensor unary_op(const char* name, const F& f, const Tensor& x) {
  Tensor y = cpu::map_unary(f, x, name);
  // NOTE: the closure keeps a detached view of y: capturing y itself would make y's node own y (a cycle).
  record(name, y, {x}, [f, name, x = x.detach(), y = y.detach()](const Tensor& grad) -> Grads {
    return {cpu::map_unary_backward(f, grad, x, y, name)};
  });
  return y;
}

}  // namespace

#define EMBER_DEFINE_UNARY(name, Functor) \
  Tensor name(const Tensor& x) { return unary_op(#name, math::Functor{}, x); }
EMBER_UNARY_OPS(EMBER_DEFINE_UNARY)
#undef EMBER_DEFINE_UNARY

Tensor pow(const Tensor& x, double exponent) { return unary_op("pow", math::Pow{exponent}, x); }
Tensor add_scalar(const Tensor& x, double value) { return unary_op("add_scalar", math::AddScalar{value}, x); }
Tensor mul_scalar(const Tensor& x, double value) { return unary_op("mul_scalar", math::MulScalar{value}, x); }

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add_scalar(a, b); }
Tensor operator-(const Tensor& a, double b) { return add_scalar(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul_scalar(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul_scalar(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add_scalar(b, a); }
Tensor operator-(double a, const Tensor& b) { return add_scalar(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul_scalar(b, a); }
Tensor operator/(double a, const Tensor& b) { return mul_scalar(pow(b, -1.0), a); }

}  // namespace ember
