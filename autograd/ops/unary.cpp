// Element-wise math ops. Forward: y = f(x). Backward: dx = dy * f'(x, y), one fused pass.
// The formulas live in core/unary_math.h; this file runs them through core/kernels.h's
// unary_forward and unary_backward (the CPU's loops, or cuda/unary_kernels.cu on a GPU) and wires
// them into autograd.
#include "autograd/ops/op_support.h"
#include "core/unary_math.h"

namespace ember {
namespace {

// The checks every device relies on, then the forward kernel made from the functor.
template <typename F>
Tensor forward_kernel(const F& f, const Tensor& x, const char* name) {
  EMBER_CHECK(x.defined(), "{}: the input tensor is undefined", name);
  EMBER_CHECK(is_real(x.dtype()), "{}: expected a floating tensor (float32, float64 or bfloat16), got {}", name,
              dtype_name(x.dtype()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel::unary_forward(kernel_on(x), f, x.shape(), strided(y), strided(x));
  return y;
}

// grad * f'(x, y). Only what f.df reads is defined (F::reads); the kernels are handed a stand-in of the
// same shape for the other (df never reads it): the one that is there, or the gradient when df reads neither.
template <typename F>
Tensor backward_kernel(const F& f, const Tensor& grad, const Tensor& x_saved, const Tensor& y_saved) {
  auto or_else = [](const Tensor& a, const Tensor& b) -> const Tensor& { return a.defined() ? a : b; };
  const Tensor& x = or_else(x_saved, or_else(y_saved, grad));
  const Tensor& y = or_else(y_saved, x);
  Tensor grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel::unary_backward(kernel_on(x), f, x.shape(), strided(grad_x), strided(grad), strided(x), strided(y));
  return grad_x;
}

template <typename F>
Tensor unary_op(const char* name, const F& f, const Tensor& x) {
  Tensor y = forward_kernel(f, x, name);
  // Only what df reads is kept until backward (F::reads, core/unary_math.h): x, y or neither.
  record(name, y, {x},
         [f, x = F::reads == math::Reads::Input ? save(x) : SavedTensor(),
          y = F::reads == math::Reads::Output ? save(y) : SavedTensor()](const Tensor& grad) -> Grads {
           return {backward_kernel(f, grad, x.get(), y.get())};
         });
  return y;
}

}  // namespace

#define EMBER_DEFINE_UNARY(name, Functor, ...) \
  Tensor name(const Tensor& x) { return unary_op(#name, math::Functor{}, x); }
EMBER_UNARY_OPS(EMBER_DEFINE_UNARY)
#undef EMBER_DEFINE_UNARY

Tensor pow(const Tensor& x, double exponent) { return unary_op("pow", math::Pow{exponent}, x); }
Tensor add_scalar(const Tensor& x, double value) { return unary_op("add_scalar", math::AddScalar{value}, x); }
Tensor mul_scalar(const Tensor& x, double value) { return unary_op("mul_scalar", math::MulScalar{value}, x); }

// -x of an integer tensor is 0 - x (neg's kernels are floating); of a bool tensor an error, as in PyTorch.
Tensor operator-(const Tensor& a) {
  if (a.defined() && is_integer(a.dtype())) return sub(scalar(0.0, a.dtype(), a.device()), a);
  return neg(a);
}

}  // namespace ember
