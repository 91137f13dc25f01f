// Element-wise math on the GPU, core/kernels.h's unary_forward and unary_backward: a grid-stride
// forward kernel y = f(x) and a backward kernel grad_x = grad * f'(x, y), instantiated for every
// functor of core/unary_math.h (EMBER_HD makes each functor __host__ __device__, so the GPU runs the
// very formulas the CPU tests check). float32, float64, and bfloat16 computed in float, each result
// rounded once (the CPU's tables hold the same values). The kernels walk contiguous memory: a strided
// operand is first copied into a contiguous scratch block (one copy launch, as x.contiguous() would).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/unary_math.h"
#include "cuda/dispatch.h"
#include "cuda/gpu_nan.h"
#include "cuda/launch.h"
#include "cuda/scratch.h"

namespace ember::cuda {
namespace {

// y = f(x), a grid-stride loop, a thread per element. T is computed in compute_type<T> (core/bfloat16.h):
// float for bfloat16, each result rounded once, as the CPU's bfloat16 loops.
template <typename T, typename F, typename C = compute_type<T>>
__global__ void forward_kernel(F f, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = T(gpu_float(f.f(C(x[i]))));  // gpu_float: a NaN as the GPU writes it (cuda/gpu_nan.h)
}

// grad_x = grad * f'(x, y), in compute_type<T>; a grid-stride loop, a thread per element.
template <typename T, typename F, typename C = compute_type<T>>
__global__ void backward_kernel(F f, const T* grad, const T* x, const T* y, T* grad_x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    grad_x[i] = T(gpu_float(C(grad[i]) * f.df(C(x[i]), C(y[i]))));
}

constexpr const char* kNotFloating =
    "element-wise math: expected a floating tensor (float32, float64 or bfloat16) on CUDA";

template <typename F>
void launch_forward(const F& f, int device, int dtype, const void* x, void* y, int64_t n) {
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_real(dtype, kNotFloating, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  EMBER_CUDA_LAUNCHED("unary kernel");
}

template <typename F>
void launch_backward(const F& f, int device, int dtype, const void* grad, const void* x, const void* y,
                     void* grad_x, int64_t n) {
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch_real(dtype, kNotFloating, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const T*>(grad), static_cast<const T*>(x),
                                                            static_cast<const T*>(y), static_cast<T*>(grad_x), n);
  });
  EMBER_CUDA_LAUNCHED("unary kernel");
}

// Pointers to contiguous copies of a call's operands (row-major over `shape`): an operand laid out so
// is read in place (the test of Tensor::is_contiguous: size-1 dims aside, strides are the sizes'
// products); another is copied once into a scratch block, which lives as long as this object, and an
// operand handed twice (one tensor standing for x and y) is copied once.
class ContiguousOperands {
 public:
  ContiguousOperands(int device, const Shape& shape) : device_(device), shape_(shape) {
    for (int64_t s : shape) n_ *= s;
  }
  const void* operator()(const Strided& t) {
    if (laid_out_contiguously(t)) return t.data;
    for (int k = 0; k < count_; ++k)
      if (copied_[k].data == t.data && copied_[k].strides == t.strides) return scratch_[k]->ptr;
    const size_t size = t.dtype == kFloat64 ? 8 : t.dtype == kBFloat16 ? 2 : 4;
    scratch_[count_] = std::make_unique<Scratch>(device_, size_t(n_) * size);
    Strided to{scratch_[count_]->ptr, t.dtype, contiguous_strides(shape_)};
    copy(On{device_, t.dtype}, shape_, to, t);
    copied_[count_] = t;
    return scratch_[count_++]->ptr;
  }

 private:
  bool laid_out_contiguously(const Strided& t) const {
    int64_t expected = 1;
    for (size_t d = shape_.size(); d-- > 0;) {
      if (shape_[d] == 1) continue;
      if (t.strides[d] != expected) return false;
      expected *= shape_[d];
    }
    return true;
  }
  int device_;
  const Shape& shape_;
  int64_t n_ = 1;
  int count_ = 0;
  Strided copied_[3];
  std::unique_ptr<Scratch> scratch_[3];
};

template <typename F>
void forward(const On& on, const F& f, const Shape& shape, const Strided& y, const Strided& x) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return;
  ContiguousOperands contiguous(on.device, shape);
  launch_forward(f, on.device, on.dtype, contiguous(x), y.data, n);
}

template <typename F>
void backward(const On& on, const F& f, const Shape& shape, const Strided& grad_x, const Strided& grad,
              const Strided& x, const Strided& y) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return;
  ContiguousOperands contiguous(on.device, shape);
  const void* g = contiguous(grad);
  const void* xc = contiguous(x);
  launch_backward(f, on.device, on.dtype, g, xc, contiguous(y), grad_x.data, n);
}

}  // namespace

#define EMBER_DEFINE_CUDA_UNARY(name, Functor, ...)                                                               \
  void unary_forward(const On& on, const math::Functor& f, const Shape& shape, const Strided& y, const Strided& x) { \
    forward(on, f, shape, y, x);                                                                                  \
  }                                                                                                               \
  void unary_backward(const On& on, const math::Functor& f, const Shape& shape, const Strided& grad_x,            \
                      const Strided& grad, const Strided& x, const Strided& y) {                                  \
    backward(on, f, shape, grad_x, grad, x, y);                                                                   \
  }
EMBER_UNARY_OPS(EMBER_DEFINE_CUDA_UNARY)
EMBER_UNARY_PARAM_OPS(EMBER_DEFINE_CUDA_UNARY)
#undef EMBER_DEFINE_CUDA_UNARY

}  // namespace ember::cuda
