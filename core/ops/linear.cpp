// The affine map of a Linear layer as one op: y = x W^T + b, for x [..., K], W [N, K], b [N].
// It is matmul(x, W^T) + b, fused: the GEMM adds the bias to each tile of y while the tile is in
// cache (core/cpu/gemm.h), so there is no separate pass over y and no temporary.
// Backward (x seen as [rows, K], g as [rows, N]):
//   dx = g W      dW = g^T x      db = sum over rows of g
// W^T and g^T are strided views read in place by the GEMM; db uses the deterministic row sum.
// Zero-size dims as in PyTorch: no input features (K = 0) give y = b on every row (0 without a bias)
// and dW of shape [N, 0]; no rows give an empty y and dW = 0, db = 0.
// Mixed precision (core/precision.h): in a bfloat16 scope the three products take bfloat16 operands
// (cpu::gemm_bf16) and sum in float32; bfloat16 tensors go through that path and come back bfloat16.
#include "core/cpu/gemm.h"
#include "core/ops/op_support.h"
#include "core/precision.h"

namespace ember {
namespace {

template <typename T>
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, int64_t rows, int64_t K,
                    int64_t N) {
  // W^T(k, n) = W[n, k]: the weight read with swapped strides.
  cpu::gemm(rows, N, K, T(1), x.data<T>(), K, 1, w.data<T>(), 1, K, T(0), y.data<T>(), N,
            b.defined() ? b.data<T>() : nullptr);
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
  EMBER_CHECK(is_real(x.dtype()) && weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
              "linear: input, weight and bias must share one floating dtype, got {} and {}", dtype_name(x.dtype()),
              dtype_name(weight.dtype()));
  check_same_device("linear", {&x, &weight});
  if (bias.defined()) check_same_device("linear", {&x, &bias});
  if (x.dtype() == Dtype::BFloat16) {  // bfloat16 in, bfloat16 out: float32 values, multiplied in bfloat16
    MixedPrecisionGuard bf16(Precision::BFloat16);
    const Dtype f32 = Dtype::Float32;
    return linear(x.to(f32), weight.to(f32), bias.defined() ? bias.to(f32) : Tensor()).to(Dtype::BFloat16);
  }
  const bool bf16 = product_precision() == Precision::BFloat16 && x.dtype() == Dtype::Float32;

  // NOTE: not x.numel() / K, which divides by zero for zero input features (x [4, 0]): then y = bias.
  const int64_t rows = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  // Detached, contiguous operands: the kernels read raw memory (a transposed weight is copied once).
  Tensor x2 = x.detach().contiguous(), w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (y.numel() > 0 && x.device().is_cuda())
    gpu::linear_forward(x2, w, b, y, rows, K, N, bf16);  // cuBLAS; the bias is copied into y first
  else if (y.numel() > 0 && bf16)
    cpu::gemm_bf16(rows, N, K, 1.0f, x2.data<float>(), K, 1, w.data<float>(), 1, K, 0.0f, y.data<float>(), N,
                   b.defined() ? b.data<float>() : nullptr);
  else if (y.numel() > 0)
    dispatch_floating(x.dtype(), "linear", [&](auto tag) {
      linear_forward<typename decltype(tag)::type>(x2, w, b, y, rows, K, N);
    });

  const bool need_dx = x.requires_grad(), need_dw = weight.requires_grad();
  const bool need_db = bias.defined() && bias.requires_grad();
  // Only what backward will read is kept: x for dW, W for dx.
  record("linear", y, {x, weight, bias},
         [saved_x = need_dw ? save(x2) : SavedTensor(), saved_w = need_dx ? save(w) : SavedTensor(), rows, K, N, need_dx,
          need_dw, need_db, bf16, x_shape = x.shape()](const Tensor& g) -> Grads {
           const Tensor &x2 = saved_x.get(), &w = saved_w.get();
           Tensor g2 = g.contiguous().view({rows, N});
           Tensor dx, dw, db;
           if (g2.device().is_cuda()) {
             if (need_dx) dx = Tensor::empty(x_shape, g2.dtype(), g2.device());
             if (need_dw) dw = Tensor::empty({N, K}, g2.dtype(), g2.device());
             gpu::linear_backward(g2, x2, w, need_dx ? &dx : nullptr, need_dw ? &dw : nullptr, rows, K, N, bf16);
             if (need_db) db = sum(g2, {0});
             return {dx, dw, db};
           }
           if (bf16) {  // the products in bfloat16, like the forward's
             if (need_dx) {
               dx = Tensor::empty(x_shape, g2.dtype());
               cpu::gemm_bf16(rows, K, N, 1.0f, g2.data<float>(), N, 1, w.data<float>(), K, 1, 0.0f, dx.data<float>(), K);
             }
             if (need_dw) {
               dw = Tensor::empty({N, K}, g2.dtype());
               cpu::gemm_bf16(N, K, rows, 1.0f, g2.data<float>(), 1, N, x2.data<float>(), K, 1, 0.0f, dw.data<float>(), K);
             }
             if (need_db) db = sum(g2, {0});
             return {dx, dw, db};
           }
           dispatch_floating(g2.dtype(), "linear", [&](auto tag) {
             using T = typename decltype(tag)::type;
             if (need_dx) {
               dx = Tensor::empty(x_shape, g2.dtype());
               cpu::gemm(rows, K, N, T(1), g2.data<T>(), N, 1, w.data<T>(), K, 1, T(0), dx.data<T>(), K);
             }
             if (need_dw) {  // g^T: element (n, r) of g^T is g[r, n]
               dw = Tensor::empty({N, K}, g2.dtype());
               cpu::gemm(N, K, rows, T(1), g2.data<T>(), 1, N, x2.data<T>(), K, 1, T(0), dw.data<T>(), K);
             }
           });
           if (need_db) db = sum(g2, {0});
           return {dx, dw, db};
         });
  return y;
}

}  // namespace ember
