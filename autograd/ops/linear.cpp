// The affine map of a Linear layer as one op: y = x W^T + b, for x [..., K], W [N, K], b [N].
// It is matmul(x, W^T) + b, fused: the kernels kernel::linear_forward / linear_backward (core/kernels.h;
// CPU: core/cpu/products.cpp, GPU: cuda/blas.cu). The CPU's GEMM adds the bias to each tile of y while
// the tile is in cache, so there is no separate pass over y and no temporary.
// Backward (x seen as [rows, K], g as [rows, N]):
//   dx = g W      dW = g^T x      db = sum over rows of g
// W^T and g^T are strided views read in place by the GEMM; db uses the deterministic row sum.
// Zero-size dims as in PyTorch: no input features (K = 0) give y = b on every row (0 without a bias)
// and dW of shape [N, 0]; no rows give an empty y and dW = 0, db = 0.
// Mixed precision (core/precision.h): in a bfloat16 scope, or for a bfloat16 input, the input and the
// weight are rounded to bfloat16, the products summed in float32 and y is bfloat16, as torch.autocast's
// linear: linear_bf16 below (kernel::linear_forward_bf16 / linear_backward_bf16).
#include <cstdint>

#include "autograd/ops/op_support.h"
#include "core/precision.h"

namespace ember {
namespace {

// The mixed-precision linear: x (float32 or bfloat16) and the float32 W rounded to bfloat16, y = x W^T + b
// summed in float32 and stored as bfloat16. Backward: dx = g W in x's dtype, dW = g^T x and db in float32
// (the master weights' dtype), every product from bfloat16 operands. A device whose kernel wants them
// (kernel::linear_bf16_rounds_first: the CPU) gets x and W rounded to bfloat16 first, and the backward keeps
// those (half the bytes of float32 ones); any other gets and keeps them as they are.
Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t K, int64_t N) {
  const Dtype bf16 = Dtype::BFloat16;
  Tensor xk = x.detach().contiguous(), wk = weight.detach().contiguous();
  if (kernel::linear_bf16_rounds_first(kernel_on(x))) xk = xk.to(bf16), wk = wk.to(bf16);
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  const On on = kernel_on(xk);  // x's device, and the dtype of x as the kernels get it
  const int w_dtype = int(wk.dtype());
  Tensor y = Tensor::empty(out_shape, bf16, x.device());
  if (y.numel() > 0)
    kernel::linear_forward_bf16(on, xk.raw_data(), wk.raw_data(), w_dtype, b.defined() ? b.data<float>() : nullptr,
                                y.raw_data(), rows, K, N);
  const bool need_dx = x.requires_grad(), need_dw = weight.requires_grad();
  const bool need_db = bias.defined() && bias.requires_grad();
  record("linear", y, {x, weight, bias},
         [on, w_dtype, saved_x = need_dw ? save(xk) : SavedTensor(), saved_w = need_dx ? save(wk) : SavedTensor(), rows,
          K, N, need_dx, need_dw, need_db, x_dtype = x.dtype(), x_shape = x.shape()](const Tensor& g) -> Grads {
           const Tensor &xk = saved_x.get(), &wk = saved_w.get();
           Tensor g16 = g.contiguous().to(Dtype::BFloat16).view({rows, N});
           const Device device = g16.device();
           Tensor dx = need_dx ? Tensor::empty(x_shape, x_dtype, device) : Tensor();
           Tensor dw = need_dw ? Tensor::empty({N, K}, Dtype::Float32, device) : Tensor();
           Tensor db = need_db ? Tensor::empty({N}, Dtype::Float32, device) : Tensor();
           Tensor scratch =
               need_db ? Tensor::empty({kernel::linear_bf16_scratch(on, rows, N)}, Dtype::Float32, device) : Tensor();
           kernel::linear_backward_bf16(on, g16.raw_data(), data_or_null(xk), data_or_null(wk), w_dtype,
                                        data_or_null(dx), int(x_dtype), need_dw ? dw.data<float>() : nullptr,
                                        need_db ? db.data<float>() : nullptr, rows, K, N,
                                        need_db ? scratch.data<float>() : nullptr);
           return {dx, dw, db};
         });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  EMBER_CHECK(x.defined() && weight.defined(), "linear: the input or the weight is undefined");
  EMBER_CHECK(weight.dim() == 2, "linear: weight must be [out_features, in_features], got {}",
              shape_str(weight.shape()));
  const int64_t N = weight.size(0), K = weight.size(1);
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == K, "linear: input {} does not end in in_features {}",
              shape_str(x.shape()), K);
  EMBER_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == N),
              "linear: bias must be [{}], got {}", N, bias.defined() ? shape_str(bias.shape()) : "");
  EMBER_CHECK(is_real(x.dtype()) && is_real(weight.dtype()) && (!bias.defined() || bias.dtype() == weight.dtype()),
              "linear: input, weight and bias must be floating, and the bias of the weight's dtype, got {}, {} and {}",
              dtype_name(x.dtype()), dtype_name(weight.dtype()), bias.defined() ? dtype_name(bias.dtype()) : "none");
  check_same_device("linear", {&x, &weight});
  if (bias.defined()) check_same_device("linear", {&x, &bias});
  const bool in_scope = product_precision() == Precision::BFloat16;
  const bool mixed = x.dtype() == Dtype::BFloat16 && weight.dtype() == Dtype::Float32;
  EMBER_CHECK(weight.dtype() == x.dtype() || mixed,
              "linear: input and weight dtypes differ ({} and {}); a bfloat16 input with a float32 weight is "
              "mixed precision", dtype_name(x.dtype()), dtype_name(weight.dtype()));
  if (weight.dtype() == Dtype::Float32 && (mixed || (in_scope && x.dtype() == Dtype::Float32)))
    return linear_bf16(x, weight, bias, numel(Shape(x.shape().begin(), x.shape().end() - 1)), K, N);
  if (x.dtype() == Dtype::BFloat16) {  // all bfloat16: float32 values, multiplied in bfloat16
    MixedPrecisionGuard bf16(Precision::BFloat16);
    const Dtype f32 = Dtype::Float32;
    return linear(x.to(f32), weight.to(f32), bias.defined() ? bias.to(f32) : Tensor()).to(Dtype::BFloat16);
  }

  // NOTE: not x.numel() / K, which divides by zero for zero input features (x [4, 0]): then y = bias.
  const int64_t rows = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  // Detached, contiguous operands: the kernels read raw memory (a transposed weight is copied once).
  Tensor x2 = x.detach().contiguous(), w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (y.numel() > 0)
    kernel::linear_forward(kernel_on(x), x2.raw_data(), w.raw_data(), data_or_null(b), y.raw_data(), rows, K, N);

  const bool need_dx = x.requires_grad(), need_dw = weight.requires_grad();
  const bool need_db = bias.defined() && bias.requires_grad();
  // Only what backward will read is kept: x for dW, W for dx.
  record("linear", y, {x, weight, bias},
         [saved_x = need_dw ? save(x2) : SavedTensor(), saved_w = need_dx ? save(w) : SavedTensor(), rows, K, N, need_dx,
          need_dw, need_db, x_shape = x.shape()](const Tensor& g) -> Grads {
           const Tensor &x2 = saved_x.get(), &w = saved_w.get();
           Tensor g2 = g.contiguous().view({rows, N});
           Tensor dx = need_dx ? Tensor::empty(x_shape, g2.dtype(), g2.device()) : Tensor();
           Tensor dw = need_dw ? Tensor::empty({N, K}, g2.dtype(), g2.device()) : Tensor();
           kernel::linear_backward(kernel_on(g2), g2.raw_data(), data_or_null(x2), data_or_null(w), data_or_null(dx),
                                   data_or_null(dw), rows, K, N);
           return {dx, dw, need_db ? sum(g2, {0}) : Tensor()};
         });
  return y;
}

}  // namespace ember
