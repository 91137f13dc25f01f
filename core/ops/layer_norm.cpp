// Normalisations over the last dim, each a fused forward and backward; each section says its own.
// Layer norm: y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased (population)
// variance, weight and bias of shape [D] (either may be undefined: no scale / no shift). Fused
// forward saving mean and 1/std per row; fused backward giving dx, dweight, dbias. Statistics are
// computed in the input's dtype, shifted (core/cpu/layer_norm.h); dweight and dbias are summed over
// rows deterministically, independent of the thread count.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu/layer_norm.h"
#include "core/ops/op_support.h"

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
  LayerNormForward f = x.device().is_cuda() ? gpu::layer_norm_forward(x2, w, b, eps)
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
           LayerNormGrads grads =
               x2.device().is_cuda() ? gpu::layer_norm_backward(g2, x2, mean, rstd, w, need_dx, need_dw, need_db)
                                     : cpu::layer_norm_backward(g2, x2, mean, rstd, w, need_dx, need_dw, need_db);
           return {need_dx ? grads.dx.view(shape) : Tensor(), grads.dweight, grads.dbias};
         });
  return y;
}


// ---- RMS norm: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) per row of the last dim
// (layer norm without the mean and the bias: LLaMA's and T5's normalisation). Backward, with
// xhat = x * rstd and gw = grad * weight:
//   dx = rstd * (gw - xhat * mean(gw * xhat)),   dweight = sum over rows of grad * xhat.
// Sums in double, in a fixed order: 8 lanes per row, and dweight by chunks of 64 rows added in order,
// the chunks of cuda/row_kernels.cu. The op added in docs/adding-an-op.md.
namespace {

constexpr int64_t kRmsChunkRows = 64;

// sum of term(i) for i in [0, n) in double, in 8 lanes (so that it vectorises) added in a fixed order.
template <typename Term>
double lanes_sum(int64_t n, Term term) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lanes[k] += term(i + k);
  for (; i < n; ++i) lanes[0] += term(i);
  double total = 0;
  for (double lane : lanes) total += lane;
  return total;
}

// x, y [rows, D] contiguous, w [D] or null, rstd [rows].
template <typename T>
void rms_norm_forward_cpu(const T* x, const T* w, T* y, double* rstd, int64_t rows, int64_t D, double eps) {
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / D), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const T* xr = x + r * D;
      const double mean_square = lanes_sum(D, [&](int64_t i) { return double(xr[i]) * double(xr[i]); }) / double(D);
      const double rs = 1.0 / std::sqrt(mean_square + eps);
      for (int64_t i = 0; i < D; ++i) y[r * D + i] = T(double(xr[i]) * rs * (w != nullptr ? double(w[i]) : 1.0));
      rstd[r] = rs;
    }
  });
}

// dx [rows, D] and dw [D] (each null when not wanted) from g, x [rows, D] and the forward's rstd.
template <typename T>
void rms_norm_backward_cpu(const T* g, const T* x, const double* rstd, const T* w, T* dx, T* dw, int64_t rows,
                           int64_t D) {
  if (dx != nullptr)
    parallel_for(0, rows, std::max<int64_t>(1, 32768 / D), [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const T *gr = g + r * D, *xr = x + r * D;
        const double rs = rstd[r];
        auto gw = [&](int64_t i) { return double(gr[i]) * (w != nullptr ? double(w[i]) : 1.0); };
        const double mean_gwx = lanes_sum(D, [&](int64_t i) { return gw(i) * double(xr[i]) * rs; }) / double(D);
        for (int64_t i = 0; i < D; ++i) dx[r * D + i] = T(rs * (gw(i) - double(xr[i]) * rs * mean_gwx));
      }
    });
  if (dw == nullptr) return;
  const int64_t chunks = (rows + kRmsChunkRows - 1) / kRmsChunkRows;
  std::vector<double> partial(size_t(chunks * D), 0.0);
  parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c)
      for (int64_t r = c * kRmsChunkRows; r < std::min(rows, (c + 1) * kRmsChunkRows); ++r)
        for (int64_t i = 0; i < D; ++i)
          partial[size_t(c * D + i)] += double(g[r * D + i]) * double(x[r * D + i]) * rstd[r];
  });
  for (int64_t i = 0; i < D; ++i) {
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[size_t(c * D + i)];
    dw[i] = T(sum);
  }
}

}  // namespace

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
  Tensor y = Tensor::empty({rows, D}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, Dtype::Float64, x.device());
  if (x.device().is_cuda()) {
    cuda::rms_norm_forward(x.device().index, x.dtype() == Dtype::Float64, x2.raw_data(),
                           w.defined() ? w.raw_data() : nullptr, y.raw_data(), rstd.data<double>(), rows, D, eps);
  } else {
    dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      rms_norm_forward_cpu<T>(x2.data<T>(), w.defined() ? w.data<T>() : nullptr, y.data<T>(), rstd.data<double>(),
                              rows, D, eps);
    });
  }
  Tensor out = y.view(x.shape());
  const bool need_dx = x.requires_grad(), need_dw = weight.defined() && weight.requires_grad();
  // x2 and w share the storage of x and weight when those are contiguous: saved (autograd/saved_tensor.h), so
  // that an in-place change of either before backward is an error rather than a gradient of the new values.
  record("rms_norm", out, {x, weight},
         [saved_x = save(x2), saved_w = save(w), rstd, shape = x.shape(), rows, D, need_dx,
          need_dw](const Tensor& grad) -> Grads {
           const Tensor& x2 = saved_x.get();
           const Tensor& w = saved_w.get();
           Tensor g = grad.contiguous();
           Tensor dx = need_dx ? Tensor::empty({rows, D}, x2.dtype(), x2.device()) : Tensor();
           Tensor dw = need_dw ? zeros({D}, x2.dtype(), x2.device()) : Tensor();
           if (x2.device().is_cuda()) {
             Tensor partial = Tensor::empty({need_dw ? cuda::layer_norm_chunks(rows) * D : 0}, Dtype::Float64,
                                            x2.device());
             cuda::rms_norm_backward(x2.device().index, x2.dtype() == Dtype::Float64, g.raw_data(), x2.raw_data(),
                                     rstd.data<double>(), w.defined() ? w.raw_data() : nullptr,
                                     need_dx ? dx.raw_data() : nullptr, need_dw ? dw.raw_data() : nullptr, rows, D,
                                     partial.data<double>());
           } else {
             dispatch_floating(x2.dtype(), "rms_norm", [&](auto tag) {
               using T = typename decltype(tag)::type;
               rms_norm_backward_cpu<T>(g.data<T>(), x2.data<T>(), rstd.data<double>(),
                                        w.defined() ? w.data<T>() : nullptr, need_dx ? dx.data<T>() : nullptr,
                                        need_dw ? dw.data<T>() : nullptr, rows, D);
             });
           }
           return {need_dx ? dx.view(shape) : Tensor(), dw};
         });
  return out;
}

}  // namespace ember
