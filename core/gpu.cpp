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

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

}  // namespace ember::gpu
