// Selection by a bool mask: where(cond, a, b) and masked_fill(x, mask, value), with broadcasting, and the
// triangles tril and triu (masked_fill with the mask of the dropped side).
// One kernel picks element-wise between two (possibly broadcast) operands; both ops and both
// backwards are that kernel: the gradient goes to whichever operand was picked, 0 to the other.
#include <cstdint>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// out[i] = cond[i] ? a[i] : b[i] over `shape`, every operand broadcast to it; a and b same dtype.
Tensor select_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  kernel::select(kernel_on(a), shape, strided(out), strided(cond, shape), strided(a, shape), strided(b, shape));
  return out;
}

void check_mask(const Tensor& mask, const char* op, const char* what) {
  EMBER_CHECK(mask.dtype() == Dtype::Bool, "{}: {} must be a bool tensor, got {}", op, what, dtype_name(mask.dtype()));
}

}  // namespace

// d/dx = g where mask is false, 0 where it is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_same_device("masked_fill", {&x, &mask});
  check_mask(mask, "masked_fill", "mask");
  Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  EMBER_CHECK(shape == x.shape(), "masked_fill: mask of shape {} does not broadcast to x's shape {}",
              shape_str(mask.shape()), shape_str(x.shape()));
  Tensor out = select_kernel(mask, scalar(value, x.dtype(), x.device()), x, shape);
  record("masked_fill", out, {x}, [mask = save(mask)](const Tensor& g) -> Grads {
    return {select_kernel(mask.get(), scalar(0.0, g.dtype(), g.device()), g, g.shape())};
  });
  return out;
}

// da = g where cond (summed to a's shape), db = g where not cond (summed to b's shape).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device("where", {&cond, &a, &b});
  check_mask(cond, "where", "cond");
  EMBER_CHECK(a.dtype() == b.dtype(), "where: dtypes differ ({} and {})", dtype_name(a.dtype()), dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = select_kernel(cond, a, b, shape);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record("where", out, {a, b}, [saved_cond = save(cond), sa = a.shape(), sb = b.shape(), need_a, need_b](const Tensor& g) -> Grads {
    const Tensor& cond = saved_cond.get();
    Tensor zero = scalar(0.0, g.dtype(), g.device());
    return {need_a ? sum_to(select_kernel(cond, g, zero, g.shape()), sa) : Tensor(),
            need_b ? sum_to(select_kernel(cond, zero, g, g.shape()), sb) : Tensor()};
  });
  return out;
}

namespace {
// The elements of the last two dims [rows, cols] a triangle drops, as a bool [rows, cols] mask on x's device:
// column j - row i > k for tril, < k for triu, made from two small ranges (no rows x cols upload).
Tensor dropped_by_triangle(const Tensor& x, int64_t k, bool lower, const char* op) {
  EMBER_CHECK(x.defined(), "{}: the input tensor is undefined", op);
  EMBER_CHECK(x.dim() >= 2, "{}: expected a tensor with at least 2 dims (a matrix, or a batch of them), got shape {}",
              op, shape_str(x.shape()));
  const Tensor rows = arange(x.size(-2)).to(x.device()).unsqueeze(1), cols = arange(x.size(-1)).to(x.device());
  const Tensor diagonal = cols - rows;  // int64 [rows, cols]: j - i
  return lower ? gt(diagonal, k) : lt(diagonal, k);
}
}  // namespace

// masked_fill's backward masks the gradient the same way: d/dx = g inside the triangle, 0 outside.
Tensor tril(const Tensor& x, int64_t k) { return masked_fill(x, dropped_by_triangle(x, k, true, "tril"), 0.0); }
Tensor triu(const Tensor& x, int64_t k) { return masked_fill(x, dropped_by_triangle(x, k, false, "triu"), 0.0); }

}  // namespace ember
