// Element-wise arithmetic with NumPy broadcasting. The gradient of a broadcast input is the
// output gradient summed back to the input's shape (sum_to), the one place broadcasting is undone.
#include <utility>

#include "core/cpu/elementwise.h"
#include "core/ops/op_support.h"
#include "core/unary_math.h"

namespace ember {
namespace {

// The checks every device relies on, then the kernel for a's device: the CPU loop, or the CUDA
// kernel made from the same functor (a comparison gives a bool tensor).
template <typename F>
Tensor binary_kernel(const F& f, const Tensor& a, const Tensor& b, const char* name) {
  EMBER_CHECK(a.defined() && b.defined(), "{}: an input tensor is undefined", name);
  check_same_device(name, {&a, &b});
  EMBER_CHECK(a.dtype() == b.dtype(), "{}: dtypes differ ({} and {})", name, dtype_name(a.dtype()),
              dtype_name(b.dtype()));
  EMBER_CHECK(math::is_comparison<F> || a.dtype() != Dtype::Bool, "{}: arithmetic on bool tensors is not defined",
              name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (a.device().is_cpu()) return cpu::map_binary(f, a, b, shape, name);
  Tensor out = Tensor::empty(shape, math::is_comparison<F> ? Dtype::Bool : a.dtype(), a.device());
  cuda::binary(f, a.device().index, gpu::shape8(shape, name), gpu::operand(out, shape, name),
               gpu::operand(a, shape, name), gpu::operand(b, shape, name));
  return out;
}

// Type promotion: bfloat16 with float32 (or float64) computes in the wider dtype, as PyTorch does
// (a mixed-precision layer's bfloat16 output added to a float32 residual). The conversion is the
// differentiable `to`, so the bfloat16 side's gradient comes back rounded to bfloat16. Other mixed
// dtypes stay an error (binary_kernel).
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype()) return {a, b};
  if (a.dtype() == Dtype::BFloat16 && is_floating(b.dtype())) return {a.to(b.dtype()), b};
  if (b.dtype() == Dtype::BFloat16 && is_floating(a.dtype())) return {a, b.to(a.dtype())};
  return {a, b};
}

// A float32 tensor and a bfloat16 one on the CPU: the sum is float32, the bfloat16 operand widened as
// it is read, with no float32 copy of it (the residual connection of a mixed-precision model).
bool adds_widening(const Tensor& a, const Tensor& b) {
  const auto pair = [](const Tensor& x, const Tensor& y) {
    return x.dtype() == Dtype::Float32 && y.dtype() == Dtype::BFloat16;
  };
  return a.defined() && b.defined() && a.device().is_cpu() && b.device().is_cpu() && (pair(a, b) || pair(b, a));
}

}  // namespace

// d(a+b) = (dy, dy); a bfloat16 operand's gradient is dy rounded to bfloat16.
Tensor add(const Tensor& a_in, const Tensor& b_in) {
  if (adds_widening(a_in, b_in)) {
    const Tensor& wide = a_in.dtype() == Dtype::Float32 ? a_in : b_in;
    const Tensor& narrow = a_in.dtype() == Dtype::Float32 ? b_in : a_in;
    Tensor y = cpu::map_binary_widening(math::Add{}, wide, narrow, broadcast_shapes(a_in.shape(), b_in.shape(), "add"));
    record("add", y, {a_in, b_in}, [sa = a_in.shape(), sb = b_in.shape(), da = a_in.dtype(), db = b_in.dtype()](
                                       const Tensor& g) -> Grads { return {sum_to(g, sa).to(da), sum_to(g, sb).to(db)}; });
    return y;
  }
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Add{}, a, b, "add");
  record("add", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
    return {sum_to(g, sa), sum_to(g, sb)};
  });
  return y;
}

// d(a-b) = (dy, -dy)
Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Sub{}, a, b, "sub");
  record("sub", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
    return {sum_to(g, sa), sum_to(-g, sb)};
  });
  return y;
}

// d(a*b) = (dy * b, dy * a): each operand is saved for the other's gradient only (a frozen b times
// an activation a: a may change after the forward, as in PyTorch).
Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Mul{}, a, b, "mul");
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("mul", y, {a, b}, [a = need_b ? save(a) : SavedTensor(), b = need_a ? save(b) : SavedTensor(),
                            sa = a.shape(), sb = b.shape(), need_a, need_b](const Tensor& g) -> Grads {
    return {need_a ? sum_to(g * b.get(), sa) : Tensor(), need_b ? sum_to(g * a.get(), sb) : Tensor()};
  });
  return y;
}

// d(a/b) = (dy / b, -dy * a / b^2): b is read for both gradients, a for b's only.
Tensor div(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in);
  Tensor y = binary_kernel(math::Div{}, a, b, "div");
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("div", y, {a, b}, [a = need_b ? save(a) : SavedTensor(), b = save(b), sa = a.shape(), sb = b.shape(), need_a,
                            need_b](const Tensor& g) -> Grads {
    Tensor ga = g / b.get();
    return {need_a ? sum_to(ga, sa) : Tensor(), need_b ? sum_to(-ga * a.get() / b.get(), sb) : Tensor()};
  });
  return y;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

// Comparisons: bool results, no gradient.
#define EMBER_DEFINE_COMPARISON(name, Functor) \
  Tensor name(const Tensor& a, const Tensor& b) { return binary_kernel(math::Functor{}, a, b, #name); }
EMBER_COMPARISON_OPS(EMBER_DEFINE_COMPARISON)
#undef EMBER_DEFINE_COMPARISON

}  // namespace ember
