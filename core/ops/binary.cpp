// Element-wise arithmetic with NumPy broadcasting. The gradient of a broadcast input is the
// output gradient summed back to the input's shape (sum_to), the one place broadcasting is undone.
#include "autograd/node.h"
#include "core/cpu/elementwise.h"
#include "core/gpu.h"
#include "core/ops.h"
#include "core/unary_math.h"

namespace ember {
namespace {

// The kernel for a's device: the CPU loop, or the CUDA kernel made from the same functor.
template <typename Out, typename F>
Tensor binary_kernel(cuda::BinaryOp op, const F& f, const Tensor& a, const Tensor& b, const char* name) {
  if (a.defined() && a.device().is_cuda()) return gpu::binary(op, a, b, name);
  return cpu::map_binary<Out>(f, a, b, name);
}

}  // namespace

// d(a+b) = (dy, dy)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel<void>(cuda::kAdd, math::Add{}, a, b, "add");
  record("add", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
    return {sum_to(g, sa), sum_to(g, sb)};
  });
  return y;
}

// d(a-b) = (dy, -dy)
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel<void>(cuda::kSub, math::Sub{}, a, b, "sub");
  record("sub", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
    return {sum_to(g, sa), sum_to(-g, sb)};
  });
  return y;
}

// d(a*b) = (dy * b, dy * a)
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel<void>(cuda::kMul, math::Mul{}, a, b, "mul");
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("mul", y, {a, b}, [a = save(a), b = save(b), need_a, need_b](const Tensor& g) -> Grads {
    return {need_a ? sum_to(g * b.get(), a.get().shape()) : Tensor(),
            need_b ? sum_to(g * a.get(), b.get().shape()) : Tensor()};
  });
  return y;
}

// d(a/b) = (dy / b, -dy * a / b^2)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel<void>(cuda::kDiv, math::Div{}, a, b, "div");
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("div", y, {a, b}, [a = save(a), b = save(b), need_a, need_b](const Tensor& g) -> Grads {
    Tensor ga = g / b.get();
    return {need_a ? sum_to(ga, a.get().shape()) : Tensor(),
            need_b ? sum_to(-ga * a.get() / b.get(), b.get().shape()) : Tensor()};
  });
  return y;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary_kernel<bool>(cuda::kEq, math::Equal{}, a, b, "eq"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_kernel<bool>(cuda::kGt, math::Greater{}, a, b, "gt"); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_kernel<bool>(cuda::kLt, math::Less{}, a, b, "lt"); }

}  // namespace ember
