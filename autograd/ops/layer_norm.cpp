// Normalisations over the last dim, each a fused forward and backward; each section says its own.
// Layer norm: y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased (population)
// variance, weight and bias of shape [D] (either may be undefined: no scale / no shift). Fused
// forward saving mean and 1/std per row; fused backward giving dx, dweight, dbias. Statistics are
// computed in the input's dtype, shifted (core/cpu/layer_norm.cpp); dweight and dbias are summed over
// rows deterministically, independent of the thread count. The kernels: core/kernels.h.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/ops/op_support.h"

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
  if (x.dtype() == Dtype::BFloat16) return layer_norm(widened_from_bf16(x), weight, bias, eps);
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
  const On on = kernel_on(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, Dtype::Float64, x.device());
  Tensor rstd = Tensor::empty({rows}, Dtype::Float64, x.device());
  kernel::layer_norm_forward(on, x2.raw_data(), data_or_null(w), data_or_null(b), y.raw_data(), mean.data<double>(),
                             rstd.data<double>(), rows, D, eps);

  const bool need_dx = x.requires_grad();
  const bool need_dw = weight.defined() && weight.requires_grad();
  const bool need_db = bias.defined() && bias.requires_grad();
  record("layer_norm", y, {x, weight, bias},
         [on, saved_x = save(x2), saved_w = save(w), mean, rstd, shape = x.shape(), rows, D, need_dx, need_dw,
          need_db](const Tensor& g) -> Grads {
           const Tensor &x2 = saved_x.get(), &w = saved_w.get();
           const Device device = x2.device();
           Tensor g2 = g.contiguous();
           Tensor dx = need_dx ? Tensor::empty(shape, x2.dtype(), device) : Tensor();
           // With no rows the kernel sums nothing: the affine parameters' gradients are zeros.
           auto sums = [&](bool wanted) {
             return !wanted ? Tensor() : rows == 0 ? zeros({D}, x2.dtype(), device) : Tensor::empty({D}, x2.dtype(), device);
           };
           Tensor dw = sums(need_dw), db = sums(need_db);
           Tensor scratch = Tensor::empty({need_dw || need_db ? kernel::layer_norm_scratch(on, rows, D) : 0},
                                          Dtype::Float64, device);
           kernel::layer_norm_backward(on, g2.raw_data(), x2.raw_data(), mean.data<double>(), rstd.data<double>(),
                                       data_or_null(w), data_or_null(dx), data_or_null(dw), data_or_null(db), rows, D,
                                       scratch.data<double>());
           return {dx, dw, db};
         });
  return y;
}

// ---- RMS norm: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) per row of the last dim
// (layer norm without the mean and the bias: LLaMA's and T5's normalisation). Backward, with
// xhat = x * rstd and gw = grad * weight:
//   dx = rstd * (gw - xhat * mean(gw * xhat)),   dweight = sum over rows of grad * xhat.
// Sums in double, in a fixed order: 8 lanes per row, and dweight by chunks of 64 rows added in order,
// the chunks of cuda/norm_kernels.cu. The op added in docs/adding-an-op.md.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  EMBER_CHECK(x.defined(), "rms_norm: the input tensor is undefined");
  if (x.dtype() == Dtype::BFloat16) return rms_norm(widened_from_bf16(x), weight, eps);
  EMBER_CHECK(is_floating(x.dtype()), "rms_norm: expected a floating input (float32 or float64), got {}",
              dtype_name(x.dtype()));
  EMBER_CHECK(x.dim() >= 1, "rms_norm: the input must have at least 1 dim, got a 0-d tensor");
  const int64_t D = x.size(-1);
  EMBER_CHECK(D > 0, "rms_norm: the last dim of input {} is empty", shape_str(x.shape()));
  EMBER_CHECK(eps >= 0 && std::isfinite(eps), "rms_norm: eps must be finite and >= 0, got {}", eps);
  if (weight.defined()) {
    EMBER_CHECK(weight.dim() == 1 && weight.size(0) == D,
                "rms_norm: weight shape {} does not match the last dim {} of input {}", shape_str(weight.shape()), D,
                shape_str(x.shape()));
    EMBER_CHECK(weight.dtype() == x.dtype(), "rms_norm: weight dtype {} differs from the input dtype {}",
                dtype_name(weight.dtype()), dtype_name(x.dtype()));
    check_same_device("rms_norm", {&x, &weight});
  }
  const int64_t rows = x.numel() / D;
  // Detached: the kernels read raw memory; a recorded contiguous() copy would add a node.
  Tensor x2 = x.detach().contiguous().view({rows, D});
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const On on = kernel_on(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, Dtype::Float64, x.device());
  kernel::rms_norm_forward(on, x2.raw_data(), data_or_null(w), y.raw_data(), rstd.data<double>(), rows, D, eps);
  const bool need_dx = x.requires_grad(), need_dw = weight.defined() && weight.requires_grad();
  // x2 and w share the storage of x and weight when those are contiguous: saved (autograd/saved_tensor.h), so
  // that an in-place change of either before backward is an error rather than a gradient of the new values.
  record("rms_norm", y, {x, weight},
         [on, saved_x = save(x2), saved_w = save(w), rstd, shape = x.shape(), rows, D, need_dx,
          need_dw](const Tensor& grad) -> Grads {
           const Tensor &x2 = saved_x.get(), &w = saved_w.get();
           Tensor g = grad.contiguous();
           Tensor dx = need_dx ? Tensor::empty(shape, x2.dtype(), x2.device()) : Tensor();
           Tensor dw = need_dw ? zeros({D}, x2.dtype(), x2.device()) : Tensor();
           Tensor scratch = Tensor::empty({need_dw ? rms_norm_scratch(rows, D) : 0}, Dtype::Float64, x2.device());
           kernel::rms_norm_backward(on, g.raw_data(), x2.raw_data(), rstd.data<double>(), data_or_null(w),
                                     data_or_null(dx), data_or_null(dw), rows, D, scratch.data<double>());
           return {dx, dw};
         });
  return y;
}

}  // namespace ember
