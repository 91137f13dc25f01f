// Host wrappers of the CUDA kernels (see core/gpu.h): operand layout, result allocation. The ops
// have checked their inputs (devices, dtypes, shapes); only what the GPU cannot do is refused here.
#include "core/gpu.h"

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

Tensor attention_forward(const Tensor& qkv, int64_t heads, const Tensor& mask, bool causal, AttentionBand band,
                         Tensor& lse, Tensor* weights, bool bf16) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], D = qkv.shape()[2] / 3;
  const char* op = band.on() ? "window_attention" : "attention";
  EMBER_CHECK(D % heads == 0 && D / heads <= cuda::attention_max_head_dim(),
              "{}: head size {} exceeds the fused CUDA kernels' {} (use EMBER_ATTENTION=composed)", op,
              heads > 0 ? D / heads : 0, cuda::attention_max_head_dim());
  Tensor out = Tensor::empty({B, T, D}, qkv.dtype(), qkv.device());
  lse = Tensor::empty({B, heads, T}, Dtype::Float64, qkv.device());
  Tensor probs;
  const bool bf16_tensors = qkv.dtype() == Dtype::BFloat16;  // the weights asked for are float32 then
  if (weights != nullptr)
    probs = Tensor::empty({B, heads, T, T}, bf16_tensors ? Dtype::Float32 : qkv.dtype(), qkv.device());
  const bool* pad = mask.defined() ? mask.data<bool>() : nullptr;
  if (bf16_tensors || (bf16 && qkv.dtype() == Dtype::Float32))
    cuda::attention_forward_bf16(device_of(qkv), scalar_type(qkv.dtype(), op), qkv.raw_data(), pad, B, T, heads, D,
                                 causal, band.window, band.global, out.raw_data(), lse.data<double>(),
                                 probs.defined() ? probs.data<float>() : nullptr);
  else
    cuda::attention_forward(device_of(qkv), is_f64(qkv), qkv.raw_data(), pad, B, T, heads, D, causal, band.window,
                            band.global, out.raw_data(), lse.data<double>(),
                            probs.defined() ? probs.raw_data() : nullptr);
  if (weights != nullptr) *weights = probs;
  return out;
}

Tensor attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int64_t heads, const Tensor& mask, bool causal, AttentionBand band, bool bf16) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], D = qkv.shape()[2] / 3;
  const char* op = band.on() ? "window_attention" : "attention";
  Tensor g = grad_out.contiguous();
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
  Tensor delta = Tensor::empty({B, heads, T}, Dtype::Float64, qkv.device());
  const bool* pad = mask.defined() ? mask.data<bool>() : nullptr;
  if (qkv.dtype() == Dtype::BFloat16 || (bf16 && qkv.dtype() == Dtype::Float32))
    cuda::attention_backward_bf16(device_of(qkv), scalar_type(qkv.dtype(), op), qkv.raw_data(), pad, B, T, heads, D, causal, band.window, band.global, out.raw_data(),
                                  g.raw_data(), lse.data<double>(), delta.data<double>(), dqkv.raw_data());
  else
    cuda::attention_backward(device_of(qkv), is_f64(qkv), qkv.raw_data(), pad, B, T, heads, D, causal, band.window,
                             band.global, out.raw_data(), g.raw_data(), lse.data<double>(), delta.data<double>(),
                             dqkv.raw_data());
  return dqkv;
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

}  // namespace ember::gpu
