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

Tensor dropout_mask(const Tensor& x, uint64_t seed, uint64_t first, uint64_t threshold, double scale,
                    const uint64_t* state) {
  Tensor in = x.detach().contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::dropout(device_of(x), scalar_type(x.dtype(), "dropout"), in.raw_data(), out.raw_data(), x.numel(), seed,
                first, threshold, scale, state);
  return out;
}

void random_fill(const Tensor& t, bool normal, uint64_t seed, uint64_t first, double a, double b) {
  cuda::random_fill(device_of(t), is_f64(t), t.raw_data(), t.numel(), normal, seed, first, a, b);
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

namespace {

// Raw pointers of the tensors of one fused multi-tensor launch (an optimiser's step, clipping).
// list() points into these vectors: the TensorPointers must outlive the launch that uses it.
struct TensorPointers {
  std::vector<void*> params, state1, state2;
  std::vector<const void*> grads;
  std::vector<int64_t> sizes;
  cuda::TensorList list(const double* weight_decays) const {
    return {int(params.size()), params.data(), grads.empty() ? nullptr : grads.data(),
            state1.empty() ? nullptr : state1.data(), state2.empty() ? nullptr : state2.data(), sizes.data(),
            weight_decays};
  }
};

// grads, state1, state2: empty, or one tensor per parameter (the op has checked that each is
// contiguous, of its parameter's device, dtype and shape).
TensorPointers tensor_pointers(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                               const std::vector<Tensor>& state1, const std::vector<Tensor>& state2) {
  TensorPointers out;
  for (size_t i = 0; i < params.size(); ++i) {
    out.params.push_back(params[i].raw_data());
    if (!grads.empty()) out.grads.push_back(grads[i].raw_data());
    if (!state1.empty()) out.state1.push_back(state1[i].raw_data());
    if (!state2.empty()) out.state2.push_back(state2[i].raw_data());
    out.sizes.push_back(params[i].numel());
  }
  return out;
}

}  // namespace

void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
               const std::vector<Tensor>& v, const std::vector<double>& weight_decays, const AdamHyper& hyper,
               const AdamHyper* device_hyper) {
  if (params.empty()) return;
  TensorPointers pointers = tensor_pointers(params, grads, m, v);
  cuda::adam_step(device_of(params[0]), is_f64(params[0]), pointers.list(weight_decays.data()), hyper, device_hyper);
}

void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& velocities, const std::vector<double>& weight_decays,
              const SgdHyper& hyper) {
  if (params.empty()) return;
  TensorPointers pointers = tensor_pointers(params, grads, velocities, {});
  cuda::sgd_step(device_of(params[0]), is_f64(params[0]), pointers.list(weight_decays.data()), hyper);
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return 0;
  // The kernel reads grads[t]: the tensors go there, with no parameter to write.
  TensorPointers pointers = tensor_pointers(tensors, tensors, {}, {});
  cuda::TensorList list = pointers.list(nullptr);
  list.params = nullptr;
  const Device device = tensors[0].device();
  Tensor partials = Tensor::empty({cuda::sum_squares_partials(list)}, Dtype::Float64, device);
  if (partials.numel() == 0) return 0;
  cuda::sum_squares(device.index, tensors[0].dtype() == Dtype::Float64, list, partials.data<double>());
  double total = 0;
  for (double partial : partials.to(Device::cpu()).to_vector<double>()) total += partial;  // in order
  return total;
}

void scale_all(const std::vector<Tensor>& tensors, double value) {
  if (tensors.empty()) return;
  // The kernel writes params[t]: the tensors themselves.
  TensorPointers pointers = tensor_pointers(tensors, {}, {}, {});
  cuda::TensorList list = pointers.list(nullptr);
  cuda::scale_all(tensors[0].device().index, tensors[0].dtype() == Dtype::Float64, list, value);
}

Tensor clip_by_norm(const std::vector<Tensor>& tensors, double max_norm) {
  const Device device = tensors[0].device();
  const bool f64 = tensors[0].dtype() == Dtype::Float64;
  TensorPointers pointers = tensor_pointers(tensors, tensors, {}, {});
  cuda::TensorList list = pointers.list(nullptr);
  list.params = nullptr;
  const int64_t count = cuda::sum_squares_partials(list);
  Tensor partials = Tensor::empty({count > 0 ? count : 1}, Dtype::Float64, device);
  if (count > 0) cuda::sum_squares(device.index, f64, list, partials.data<double>());
  Tensor norm_scale = Tensor::empty({2}, Dtype::Float64, device);
  cuda::clip_scale(device.index, partials.data<double>(), count, max_norm, norm_scale.data<double>());
  TensorPointers targets = tensor_pointers(tensors, {}, {}, {});
  cuda::scale_all_by(device.index, f64, targets.list(nullptr), norm_scale.data<double>() + 1);
  return norm_scale.select(0, 0);
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

}  // namespace ember::gpu
