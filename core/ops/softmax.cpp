// Softmax and log-softmax over any dim. Forward: e^(x - max) normalised (the max shift keeps large
// values finite; -inf entries get probability 0; a row that is all -inf, or holds +inf or NaN,
// gives NaN like PyTorch). Backward: one fused pass per row from the saved output y:
//   softmax:     dx = y * (g - sum(g * y, dim))
//   log_softmax: dx = g - exp(y) * sum(g, dim)
// Kernels: core/cpu/softmax.cpp.
#include <cstdint>

#include "core/cpu/softmax.h"
#include "core/ops/op_support.h"

namespace ember {
namespace {

Tensor softmax_op(const char* name, const Tensor& x, int64_t dim, bool log) {
  EMBER_CHECK(x.defined(), "{}: the input tensor is undefined", name);
  if (x.dtype() == Dtype::BFloat16) return softmax_op(name, widened_from_bf16(x), dim, log);
  EMBER_CHECK(is_floating(x.dtype()), "{}: expected a floating tensor (float32 or float64), got {}", name,
              dtype_name(x.dtype()));
  int64_t d = normalize_dim(dim, x.dim(), name);
  Tensor y = x.device().is_cuda() ? gpu::softmax_forward(x, d, log) : cpu::softmax_forward(x, d, log, name);
  record(name, y, {x}, [name, d, log, saved_y = save(y)](const Tensor& g) -> Grads {
    const Tensor& y = saved_y.get();
    if (y.device().is_cuda()) return {gpu::softmax_backward(g, y, d, log)};
    return {cpu::softmax_backward(g, y, d, log, name)};
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op("log_softmax", x, dim, true); }

}  // namespace ember
