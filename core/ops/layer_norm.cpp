// Layer normalisation over the last dim: y = (x - mean) / sqrt(var + eps) * weight + bias, var the
// biased (population) variance, weight and bias of shape [D] (either may be undefined: no scale /
// no shift). Fused forward saving mean and 1/std per row; fused backward giving dx, dweight, dbias.
// Statistics are computed in the input's dtype, shifted (core/cpu/layer_norm.h); dweight and dbias are
// summed over rows deterministically, independent of the thread count.
#include "autograd/node.h"
#include "core/cpu/layer_norm.h"
#include "core/gpu.h"
#include "core/ops.h"

namespace ember {
namespace {

void check_affine(const char* what, const Tensor& p, const Tensor& x, int64_t D) {
  if (!p.defined()) return;
  EMBER_CHECK(p.dim() == 1 && p.size(0) == D, "layer_norm: {} shape {} does not match the last dim {} of input {}",
              what, shape_str(p.shape()), D, shape_str(x.shape()));
  EMBER_CHECK(p.dtype() == x.dtype(), "layer_norm: {} dtype {} differs from the input dtype {}", what,
              dtype_name(p.dtype()), dtype_name(x.dtype()));
  check_same_device("layer_norm", {&x, &p});
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  EMBER_CHECK(x.defined(), "layer_norm: the input tensor is undefined");
  EMBER_CHECK(is_floating(x.dtype()), "layer_norm: expected a floating input (float32 or float64), got {}",
              dtype_name(x.dtype()));
  EMBER_CHECK(x.dim() >= 1, "layer_norm: the input must have at least 1 dim, got a 0-d tensor");
  const int64_t D = x.size(-1);
  EMBER_CHECK(D > 0, "layer_norm: the last dim of input {} is empty", shape_str(x.shape()));
  EMBER_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got {}", eps);
  check_affine("weight", weight, x, D);
  check_affine("bias", bias, x, D);

  const int64_t rows = x.numel() / D;
  // Detached: the kernels read raw memory; a recorded contiguous() copy would add a node.
  Tensor x2 = x.detach().contiguous().view({rows, D});
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  cpu::LayerNormForward f = x.device().is_cuda() ? gpu::layer_norm_forward(x2, w, b, eps)
                                                  : cpu::layer_norm_forward(x2, w, b, eps);
  Tensor y = f.y.view(x.shape());

  const bool need_dx = x.requires_grad();
  const bool need_dw = weight.defined() && weight.requires_grad();
  const bool need_db = bias.defined() && bias.requires_grad();
  record("layer_norm", y, {x, weight, bias},
         [saved_x = save(x2), saved_w = save(w), mean = f.mean, rstd = f.rstd, shape = x.shape(), rows, D, need_dx,
          need_dw, need_db](const Tensor& g) -> Grads {
           const Tensor &x2 = saved_x.get(), &w = saved_w.get();
           Tensor g2 = g.contiguous().view({rows, D});
           cpu::LayerNormGrads grads =
               x2.device().is_cuda() ? gpu::layer_norm_backward(g2, x2, mean, rstd, w, need_dx, need_dw, need_db)
                                     : cpu::layer_norm_backward(g2, x2, mean, rstd, w, need_dx, need_dw, need_db);
           return {need_dx ? grads.dx.view(shape) : Tensor(), grads.dweight, grads.dbias};
         });
  return y;
}

}  // namespace ember
