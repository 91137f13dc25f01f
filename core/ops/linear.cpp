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
// linear: linear_bf16 below (cpu::gemm_bf16 on the CPU, cuBLAS on a GPU).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/ops/op_support.h"
#include "core/parallel.h"
#include "core/precision.h"

namespace ember {
namespace {

// db for a bfloat16 g [rows, N]: its column sums in float32 (the bias's dtype). Blocks of 256 rows
// are summed on any thread, then the blocks in order: the same result for any number of threads.
Tensor column_sums(const Tensor& g, int64_t rows, int64_t N) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  std::vector<float> partial(size_t(blocks * N), 0.0f);
  const BFloat16* data = g.data<BFloat16>();
  parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      float* sums = partial.data() + b * N;
      for (int64_t r = b * kBlock; r < std::min(rows, (b + 1) * kBlock); ++r)
        for (int64_t n = 0; n < N; ++n) sums[n] += float(data[r * N + n]);
    }
  });
  Tensor db = zeros({N}, Dtype::Float32);
  float* out = db.data<float>();
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t n = 0; n < N; ++n) out[n] += partial[size_t(b * N + n)];
  return db;
}

// The mixed-precision linear: x (float32 or bfloat16) and the float32 W rounded to bfloat16, y = x W^T + b
// summed in float32 and stored as bfloat16. Backward: dx = g W in x's dtype, dW = g^T x and db in float32
// (the master weights' dtype), every product from bfloat16 operands. The CPU keeps bfloat16 copies of x and
// W for backward (half the bytes of float32 ones; its GEMM reads them in place); a GPU keeps them as they
// are, since its product (cuBLAS, gpu::linear_forward_bf16) copies each operand into a compact bfloat16
// block anyway.
Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t K, int64_t N) {
  const Dtype bf16 = Dtype::BFloat16;
  const bool on_gpu = x.device().is_cuda();
  Tensor xk = x.detach().contiguous(), wk = weight.detach().contiguous();
  if (!on_gpu) xk = xk.to(bf16), wk = wk.to(bf16);
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = Tensor::empty(out_shape, bf16, x.device());
  if (y.numel() > 0 && on_gpu)
    gpu::linear_forward_bf16(xk, wk, b, y, rows, K, N);
  else if (y.numel() > 0)
    cpu::gemm_bf16(rows, N, K, 1.0f, xk.data<BFloat16>(), K, 1, wk.data<BFloat16>(), 1, K, y.data<BFloat16>(), N,
                   b.defined() ? b.data<float>() : nullptr);
  const bool need_dx = x.requires_grad(), need_dw = weight.requires_grad();
  const bool need_db = bias.defined() && bias.requires_grad();
  record("linear", y, {x, weight, bias},
         [saved_x = need_dw ? save(xk) : SavedTensor(), saved_w = need_dx ? save(wk) : SavedTensor(), rows, K, N,
          need_dx, need_dw, need_db, on_gpu, x_dtype = x.dtype(), x_shape = x.shape()](const Tensor& g) -> Grads {
           const Tensor &xk = saved_x.get(), &wk = saved_w.get();
           Tensor g16 = g.contiguous().to(Dtype::BFloat16).view({rows, N});
           Tensor dx = need_dx ? Tensor::empty(x_shape, x_dtype, g16.device()) : Tensor();
           Tensor dw = need_dw ? Tensor::empty({N, K}, Dtype::Float32, g16.device()) : Tensor();
           if (on_gpu) {
             gpu::linear_backward_bf16(g16, xk, wk, need_dx ? &dx : nullptr, need_dw ? &dw : nullptr, rows, K, N);
             return {dx, dw, need_db ? sum(g16.to(Dtype::Float32), {0}) : Tensor()};  // float32 column sums
           }
           const BFloat16* gd = g16.data<BFloat16>();
           if (need_dx && x_dtype == Dtype::BFloat16)
             cpu::gemm_bf16(rows, K, N, 1.0f, gd, N, 1, wk.data<BFloat16>(), K, 1, dx.data<BFloat16>(), K);
           else if (need_dx)
             cpu::gemm_bf16(rows, K, N, 1.0f, gd, N, 1, wk.data<BFloat16>(), K, 1, 0.0f, dx.data<float>(), K);
           if (need_dw)  // g^T: element (n, r) of g^T is g[r, n]
             cpu::gemm_bf16(N, K, rows, 1.0f, gd, 1, N, xk.data<BFloat16>(), K, 1, 0.0f, dw.data<float>(), K);
           return {dx, dw, need_db ? column_sums(g16, rows, N) : Tensor()};
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
