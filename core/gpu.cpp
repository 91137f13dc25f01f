// Host wrappers of the CUDA kernels (see core/gpu.h): operand layout, result allocation. The ops
// have checked their inputs (devices, dtypes, shapes); only what the GPU cannot do is refused here.
#include "core/gpu.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace ember::gpu {
namespace {

static_assert(int(Dtype::Float32) == cuda::kFloat32 && int(Dtype::Float64) == cuda::kFloat64 &&
                  int(Dtype::Int32) == cuda::kInt32 && int(Dtype::Int64) == cuda::kInt64 &&
                  int(Dtype::BFloat16) == cuda::kBFloat16 && int(Dtype::Bool) == cuda::kBool,
              "core/cuda_ops.h numbers the dtypes like core/dtype.h");

// The dtype as the kernels take it. bfloat16 goes through: the element-wise kernels, the bfloat16 GEMM and
// the fused attention take it, and the ops send it nowhere else (they widen it, or refuse it, first);
// float16 has no CUDA kernels at all.
int scalar_type(Dtype dtype, const char* op) {
  EMBER_CHECK(dtype != Dtype::Float16, "{}: dtype {} has no CUDA kernels yet", op, dtype_name(dtype));
  return int(dtype);
}

int device_of(const Tensor& t) { return t.device().index; }
bool is_f64(const Tensor& t) { return t.dtype() == Dtype::Float64; }

// x with `dim` moved last, as a contiguous tensor (detached: this is kernel plumbing, not a graph).
Tensor last_dim_contiguous(const Tensor& x, int64_t dim) {
  Tensor t = x.detach();
  if (dim != x.dim() - 1) t = t.transpose(dim, -1);
  return t.contiguous();
}

Tensor upload(const std::vector<int64_t>& values, Device device) {
  if (values.empty()) return Tensor::empty({0}, Dtype::Int64, device);
  return from_vector(values, {int64_t(values.size())}).to(device);
}

}  // namespace

// The output shape as the kernels take it (at most 8 dims).
cuda::Shape8 shape8(const Shape& shape, const char* op) {
  EMBER_CHECK(shape.size() <= size_t(cuda::kMaxDims), "{}: CUDA kernels take at most {} dims, got shape {}", op,
              cuda::kMaxDims, shape_str(shape));
  cuda::Shape8 s;
  s.ndim = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) s.size[d] = shape[d];
  return s;
}

// t read over `shape` (t broadcast to it): element strides, 0 along broadcast dims.
cuda::Operand operand(const Tensor& t, const Shape& shape, const char* op) {
  cuda::Operand o;
  o.data = t.raw_data();
  o.dtype = scalar_type(t.dtype(), op);
  EMBER_CHECK(t.shape().size() <= shape.size(), "{}: {} does not broadcast to {}", op, shape_str(t.shape()),
              shape_str(shape));
  const size_t lead = shape.size() - t.shape().size();
  for (size_t d = 0; d < t.shape().size(); ++d) o.stride[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return o;
}

void copy(const Tensor& src, const Tensor& dst) {
  cuda::copy(device_of(dst), shape8(dst.shape(), "copy"), operand(dst, dst.shape(), "copy"),
             operand(src, dst.shape(), "copy"));
}

void fill(const Tensor& dst, double value) {
  cuda::fill(device_of(dst), shape8(dst.shape(), "fill_"), operand(dst, dst.shape(), "fill_"), value);
}

void add_into(const Tensor& dst, const Tensor& src, double alpha) {
  const Shape& shape = dst.shape();
  cuda::add_into(device_of(dst), shape8(shape, "add_"), operand(dst, shape, "add_"), operand(src, shape, "add_"),
                 alpha);
}

void scale(const Tensor& dst, double value) {
  cuda::scale(device_of(dst), shape8(dst.shape(), "mul_"), operand(dst, dst.shape(), "mul_"), value);
}

Tensor select(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  cuda::select(device_of(a), shape8(shape, "where"), operand(out, shape, "where"), operand(cond, shape, "where"),
               operand(a, shape, "where"), operand(b, shape, "where"));
  return out;
}

Tensor reduce(const Tensor& x, const std::vector<int64_t>& dims, cuda::ReduceKind kind) {
  const char* op = kind == cuda::kSum ? "sum" : "max";
  // Kept dims first (in order), reduced dims last: the result is [outer] laid out like keepdim.
  std::vector<int64_t> order;
  Shape keep_shape = x.shape();
  int64_t R = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) order.push_back(d);
  for (int64_t d : dims) {
    order.push_back(d);
    R *= x.shape()[size_t(d)];
    keep_shape[size_t(d)] = 1;
  }
  Tensor y = Tensor::empty(keep_shape, x.dtype(), x.device());
  const int64_t outer = y.numel();
  if (outer == 0) return y;
  if (R == 0) {  // a sum (the op refuses the max over an empty dim)
    fill(y, 0.0);
    return y;
  }
  Tensor in = x.detach().permute(order).contiguous();
  cuda::reduce_rows(device_of(x), scalar_type(x.dtype(), op), kind, in.raw_data(), y.raw_data(), outer, R);
  return y;
}

Tensor argmax(const Tensor& x, int64_t dim) {
  Shape keep_shape = x.shape();
  const int64_t n = x.shape()[size_t(dim)];
  keep_shape[size_t(dim)] = 1;
  Tensor in = last_dim_contiguous(x, dim);
  Tensor out = Tensor::empty(keep_shape, Dtype::Int64, x.device());
  if (out.numel() == 0) return out;
  // Rows of `in` follow x's other dims in order, dim itself last: the same order as keep_shape.
  cuda::argmax_rows(device_of(x), scalar_type(x.dtype(), "argmax"), in.raw_data(), out.data<int64_t>(), out.numel(), n);
  return out;
}

// in is x with dim moved last (contiguous); the result is transposed back and made contiguous.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  Tensor in = last_dim_contiguous(x, dim);
  Tensor y = Tensor::empty(in.shape(), x.dtype(), x.device());
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[size_t(dim)];
  if (y.numel() > 0 && cuda::softmax_cudnn())
    cuda::cudnn_softmax_forward(device_of(x), is_f64(x), in.raw_data(), y.raw_data(), y.numel() / n, n, log);
  else if (y.numel() > 0)
    cuda::softmax_forward(device_of(x), is_f64(x), in.raw_data(), y.raw_data(), y.numel() / n, n, log);
  if (x.dim() > 0 && dim != x.dim() - 1) y = y.transpose(dim, -1).contiguous();
  return y;
}

Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log) {
  Tensor g = last_dim_contiguous(grad, dim), yt = last_dim_contiguous(y, dim);
  Tensor dx = Tensor::empty(g.shape(), y.dtype(), y.device());
  const int64_t n = y.dim() == 0 ? 1 : y.shape()[size_t(dim)];
  if (dx.numel() > 0 && cuda::softmax_cudnn())
    cuda::cudnn_softmax_backward(device_of(y), is_f64(y), g.raw_data(), yt.raw_data(), dx.raw_data(), dx.numel() / n, n,
                                 log);
  else if (dx.numel() > 0)
    cuda::softmax_backward(device_of(y), is_f64(y), g.raw_data(), yt.raw_data(), dx.raw_data(), dx.numel() / n, n, log);
  if (y.dim() > 0 && dim != y.dim() - 1) dx = dx.transpose(dim, -1).contiguous();
  return dx;
}

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                               int64_t count) {
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const Device device = logits.device();
  CrossEntropyForward f;
  f.row_max = Tensor::empty({N}, logits.dtype(), device);
  f.sum_exp = Tensor::empty({N}, logits.dtype(), device);
  f.count = count;
  Tensor row_loss = Tensor::empty({N}, Dtype::Float64, device);
  cuda::cross_entropy_forward(device_of(logits), is_f64(logits), logits.raw_data(), targets.data<int64_t>(), N, C,
                              ignore_index, f.row_max.raw_data(), f.sum_exp.raw_data(), row_loss.data<double>());
  // The mean in double (one block, fixed order), then rounded once to the logits' dtype.
  Tensor total = Tensor::empty({}, Dtype::Float64, device);
  if (N > 0) cuda::reduce_rows(device_of(logits), cuda::kFloat64, cuda::kSum, row_loss.raw_data(), total.raw_data(), 1, N);
  else fill(total, 0.0);
  if (count > 0) scale(total, 1.0 / double(count));
  else fill(total, 0.0);
  f.loss = Tensor::empty({}, logits.dtype(), device);
  copy(total, f.loss);
  return f;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyForward& saved,
                              int64_t ignore_index, const Tensor& grad) {
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  Tensor dx = Tensor::empty({N, C}, logits.dtype(), logits.device());
  Tensor g = grad.to(Dtype::Float64).contiguous();  // on the GPU: a kernel, no wait
  cuda::cross_entropy_backward(device_of(logits), is_f64(logits), logits.raw_data(), targets.data<int64_t>(),
                               saved.row_max.raw_data(), saved.sum_exp.raw_data(), dx.raw_data(), N, C, ignore_index,
                               g.data<double>(), saved.count);
  return dx;
}

Tensor embedding_forward(const Tensor& weight, const std::vector<int64_t>& ids, const Shape& out_shape) {
  const int64_t D = weight.shape()[1];
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  Tensor ids_gpu = upload(ids, weight.device());
  cuda::embedding_forward(device_of(weight), is_f64(weight), weight.raw_data(), weight.strides()[0],
                          weight.strides()[1], ids_gpu.data<int64_t>(), int64_t(ids.size()), D, out.raw_data());
  return out;
}

Tensor embedding_backward(const Tensor& grad, int64_t V, int64_t D, const std::vector<int64_t>& rows,
                          const std::vector<int64_t>& starts, const std::vector<int64_t>& positions) {
  Tensor dweight = zeros({V, D}, grad.dtype(), grad.device());
  if (rows.empty()) return dweight;
  Tensor r = upload(rows, grad.device()), s = upload(starts, grad.device()), p = upload(positions, grad.device());
  cuda::embedding_backward(device_of(grad), is_f64(grad), grad.raw_data(), r.data<int64_t>(), s.data<int64_t>(),
                           p.data<int64_t>(), int64_t(rows.size()), D, dweight.raw_data(), nullptr);
  return dweight;
}

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, const Shape& out_shape) {
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  cuda::embedding_forward(device_of(weight), is_f64(weight), weight.raw_data(), weight.strides()[0],
                          weight.strides()[1], ids.data<int64_t>(), ids.numel(), weight.shape()[1], out.raw_data());
  return out;
}

Tensor embedding_backward(const Tensor& grad, int64_t V, int64_t D, const Tensor& buckets, int64_t n) {
  Tensor dweight = zeros({V, D}, grad.dtype(), grad.device());
  if (n == 0) return dweight;
  const int64_t* b = buckets.data<int64_t>();  // count, rows [n], starts [n + 1], positions [n]
  cuda::embedding_backward(device_of(grad), is_f64(grad), grad.raw_data(), b + 1, b + 1 + n, b + 2 + 2 * n, n, D,
                           dweight.raw_data(), b);
  return dweight;
}

bool gemm_readable(const Tensor& x) {
  const size_t n = x.shape().size();
  int64_t rows = x.shape()[n - 2], cols = x.shape()[n - 1], rs = x.strides()[n - 2], cs = x.strides()[n - 1];
  if (rows <= 1) rs = cs == 1 ? std::max<int64_t>(cols, 1) : 1;
  if (cols <= 1) cs = rs == 1 ? std::max<int64_t>(rows, 1) : 1;
  return (cs == 1 && rs >= std::max<int64_t>(cols, 1)) || (rs == 1 && cs >= std::max<int64_t>(rows, 1));
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, int64_t rows, int64_t K,
                    int64_t N) {
  const int device = device_of(x);
  double beta = 0.0;
  if (b.defined()) {  // y starts as the bias on every row; the GEMM adds x W^T to it
    copy(b, y.view({rows, N}));
    beta = 1.0;
  }
  // W^T(k, n) = W[n, k]: the weight read with swapped strides.
  cuda::gemm(device, is_f64(x), 1, rows, N, K, x.raw_data(), K, 1, 0, w.raw_data(), 1, K, 0, beta, y.raw_data(), N, 0);
}

void linear_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, int64_t rows, int64_t K,
                         int64_t N) {
  // W^T(k, n) = W[n, k]: the weight read with swapped strides.
  cuda::gemm_bf16_typed(device_of(x), rows, N, K, x.raw_data(), scalar_type(x.dtype(), "linear"), K, 1, w.raw_data(),
                        cuda::kFloat32, 1, K, y.raw_data(), cuda::kBFloat16, N, b.defined() ? b.data<float>() : nullptr);
}

void linear_backward_bf16(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor* dw,
                          int64_t rows, int64_t K, int64_t N) {
  const int device = device_of(g);
  if (dx != nullptr)  // dx [rows, K] = g [rows, N] W [N, K]
    cuda::gemm_bf16_typed(device, rows, K, N, g.raw_data(), cuda::kBFloat16, N, 1, w.raw_data(), cuda::kFloat32, K, 1,
                          dx->raw_data(), scalar_type(dx->dtype(), "linear"), K, nullptr);
  if (dw != nullptr)  // dW [N, K] = g^T [N, rows] x [rows, K]
    cuda::gemm_bf16_typed(device, N, K, rows, g.raw_data(), cuda::kBFloat16, 1, N, x.raw_data(),
                          scalar_type(x.dtype(), "linear"), K, 1, dw->raw_data(), cuda::kFloat32, K, nullptr);
}

void linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor* dw,
                     int64_t rows, int64_t K, int64_t N) {
  const int device = device_of(g);
  if (dx != nullptr)  // dx [rows, K] = g [rows, N] W [N, K]
    cuda::gemm(device, is_f64(g), 1, rows, K, N, g.raw_data(), N, 1, 0, w.raw_data(), K, 1, 0, 0.0, dx->raw_data(), K, 0);
  if (dw != nullptr)  // dW [N, K] = g^T [N, rows] x [rows, K]
    cuda::gemm(device, is_f64(g), 1, N, K, rows, g.raw_data(), 1, N, 0, x.raw_data(), K, 1, 0, 0.0, dw->raw_data(), K, 0);
}

Tensor attention_forward(const Tensor& qkv, int64_t heads, const Tensor& mask, bool causal, Tensor& lse,
                         Tensor* weights, bool bf16) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], D = qkv.shape()[2] / 3;
  EMBER_CHECK(D % heads == 0 && D / heads <= cuda::attention_max_head_dim(),
              "attention: head size {} exceeds the fused CUDA kernels' {} (use EMBER_ATTENTION=composed)",
              heads > 0 ? D / heads : 0, cuda::attention_max_head_dim());
  Tensor out = Tensor::empty({B, T, D}, qkv.dtype(), qkv.device());
  lse = Tensor::empty({B, heads, T}, Dtype::Float64, qkv.device());
  Tensor probs;
  const bool bf16_tensors = qkv.dtype() == Dtype::BFloat16;  // the weights asked for are float32 then
  if (weights != nullptr)
    probs = Tensor::empty({B, heads, T, T}, bf16_tensors ? Dtype::Float32 : qkv.dtype(), qkv.device());
  if (bf16_tensors || (bf16 && qkv.dtype() == Dtype::Float32))
    cuda::attention_forward_bf16(device_of(qkv), scalar_type(qkv.dtype(), "attention"), qkv.raw_data(),
                                 mask.defined() ? mask.data<bool>() : nullptr, B, T, heads, D, causal, out.raw_data(),
                                 lse.data<double>(), probs.defined() ? probs.data<float>() : nullptr);
  else
    cuda::attention_forward(device_of(qkv), is_f64(qkv), qkv.raw_data(), mask.defined() ? mask.data<bool>() : nullptr,
                            B, T, heads, D, causal, out.raw_data(), lse.data<double>(),
                            probs.defined() ? probs.raw_data() : nullptr);
  if (weights != nullptr) *weights = probs;
  return out;
}

Tensor attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int64_t heads, const Tensor& mask, bool causal, bool bf16) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], D = qkv.shape()[2] / 3;
  Tensor g = grad_out.contiguous();
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
  Tensor delta = Tensor::empty({B, heads, T}, Dtype::Float64, qkv.device());
  if (qkv.dtype() == Dtype::BFloat16 || (bf16 && qkv.dtype() == Dtype::Float32))
    cuda::attention_backward_bf16(device_of(qkv), scalar_type(qkv.dtype(), "attention"), qkv.raw_data(),
                                  mask.defined() ? mask.data<bool>() : nullptr, B, T, heads, D, causal, out.raw_data(),
                                  g.raw_data(), lse.data<double>(), delta.data<double>(), dqkv.raw_data());
  else
    cuda::attention_backward(device_of(qkv), is_f64(qkv), qkv.raw_data(), mask.defined() ? mask.data<bool>() : nullptr,
                             B, T, heads, D, causal, out.raw_data(), g.raw_data(), lse.data<double>(),
                             delta.data<double>(), dqkv.raw_data());
  return dqkv;
}

Tensor window_attention_forward(const Tensor& qkv, int64_t heads, int64_t window, int64_t global, const Tensor& mask,
                                bool causal, Tensor& lse, Tensor* weights) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], D = qkv.shape()[2] / 3;
  EMBER_CHECK(D % heads == 0 && D / heads <= cuda::attention_max_head_dim(),
              "window_attention: head size {} exceeds the fused CUDA kernels' {} (use EMBER_ATTENTION=composed)",
              heads > 0 ? D / heads : 0, cuda::attention_max_head_dim());
  Tensor out = Tensor::empty({B, T, D}, qkv.dtype(), qkv.device());
  lse = Tensor::empty({B, heads, T}, Dtype::Float64, qkv.device());
  Tensor probs;
  if (weights != nullptr) probs = Tensor::empty({B, heads, T, T}, qkv.dtype(), qkv.device());
  cuda::window_attention_forward(device_of(qkv), is_f64(qkv), qkv.raw_data(), mask.defined() ? mask.data<bool>() : nullptr,
                                 B, T, heads, D, causal, window, global, out.raw_data(), lse.data<double>(),
                                 probs.defined() ? probs.raw_data() : nullptr);
  if (weights != nullptr) *weights = probs;
  return out;
}

Tensor window_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                 int64_t heads, int64_t window, int64_t global, const Tensor& mask, bool causal) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], D = qkv.shape()[2] / 3;
  Tensor g = grad_out.contiguous();
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
  Tensor delta = Tensor::empty({B, heads, T}, Dtype::Float64, qkv.device());
  cuda::window_attention_backward(device_of(qkv), is_f64(qkv), qkv.raw_data(),
                                  mask.defined() ? mask.data<bool>() : nullptr, B, T, heads, D, causal, window, global,
                                  out.raw_data(), g.raw_data(), lse.data<double>(), delta.data<double>(), dqkv.raw_data());
  return dqkv;
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

}  // namespace ember::gpu
