// Softmax and log-softmax over any dim. Forward: e^(x - max) normalised (the max shift keeps large
// values finite; -inf entries get probability 0; a row that is all -inf, or holds +inf or NaN,
// gives NaN like PyTorch). Backward: one fused pass per row from the saved output y:
//   softmax:     dx = y * (g - sum(g * y, dim))
//   log_softmax: dx = g - exp(y) * sum(g, dim)
// The tensor is seen as contiguous [outer, n, inner], the softmax over n. Kernels: core/kernels.h.
#include <cstddef>
#include <cstdint>

#include "autograd/ops/op_support.h"

namespace ember {
namespace {

// x's shape as [outer, n, inner] around `dim` (a 0-d tensor: one row of one element).
struct Layout {
  int64_t outer = 1, n = 1, inner = 1;
};

Layout layout_of(const Shape& shape, int64_t dim) {
  Layout l;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (d < dim) l.outer *= shape[size_t(d)];
    else if (d == dim) l.n = shape[size_t(d)];
    else l.inner *= shape[size_t(d)];
  }
  return l;
}

Tensor softmax_op(const char* name, const Tensor& x, int64_t dim, bool log) {
  EMBER_CHECK(x.defined(), "{}: the input tensor is undefined", name);
  if (x.dtype() == Dtype::BFloat16) return softmax_op(name, widened_from_bf16(x), dim, log);
  EMBER_CHECK(is_floating(x.dtype()), "{}: expected a floating tensor (float32 or float64), got {}", name,
              dtype_name(x.dtype()));
  const int64_t d = normalize_dim(dim, x.dim(), name);
  const Layout l = layout_of(x.shape(), d);
  const On on = kernel_on(x);
  Tensor src = x.detach().contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor scratch = Tensor::empty({kernel::softmax_scratch(on, l.outer, l.n, l.inner, false)}, x.dtype(), x.device());
  kernel::softmax_forward(on, src.raw_data(), y.raw_data(), l.outer, l.n, l.inner, log, scratch.raw_data());
  record(name, y, {x}, [on, l, log, saved_y = save(y)](const Tensor& grad) -> Grads {
    const Tensor& y = saved_y.get();
    Tensor g = grad.contiguous();
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    Tensor scratch = Tensor::empty({kernel::softmax_scratch(on, l.outer, l.n, l.inner, true)}, y.dtype(), y.device());
    kernel::softmax_backward(on, g.raw_data(), y.raw_data(), dx.raw_data(), l.outer, l.n, l.inner, log,
                             scratch.raw_data());
    return {dx};
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op("log_softmax", x, dim, true); }

}  // namespace ember
