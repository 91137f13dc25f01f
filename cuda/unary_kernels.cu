// Element-wise math on the GPU (contiguous operands; core/ops/unary.cpp makes them so): a grid-stride forward kernel y = f(x) and a backward kernel
// grad_x = grad * f'(x, y), instantiated for every functor of core/unary_math.h (EMBER_HD makes
// each functor __host__ __device__, so the GPU runs the very formulas the CPU tests check). float32,
// float64, and bfloat16 computed in float, each result rounded once (the CPU's tables hold the same values).
#include <cstdint>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "cuda/gpu_nan.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

// T is computed in compute_type<T> (core/bfloat16.h): float for bfloat16, each result rounded once, as the
// CPU's bfloat16 loops.
template <typename T, typename F, typename C = compute_type<T>>
__global__ void forward_kernel(F f, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = T(gpu_float(f.f(C(x[i]))));  // gpu_float: a NaN as the GPU writes it (cuda/gpu_nan.h)
}

template <typename T, typename F, typename C = compute_type<T>>
__global__ void backward_kernel(F f, const T* grad, const T* x, const T* y, T* grad_x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    grad_x[i] = T(gpu_float(C(grad[i]) * f.df(C(x[i]), C(y[i]))));
}

// Calls fn(T{}) for the element type of `dtype`.
template <typename Fn>
void dispatch(int dtype, Fn&& fn) {
  switch (dtype) {
    case kFloat32: fn(float{}); return;
    case kFloat64: fn(double{}); return;
    case kBFloat16: fn(BFloat16{}); return;
    default: raise_message("element-wise math: expected a floating tensor (float32, float64 or bfloat16) on CUDA");
  }
}

template <typename F>
void launch_forward(const F& f, int device, int dtype, const void* x, void* y, int64_t n) {
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  dispatch(dtype, [&](auto tag) {
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
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const T*>(grad), static_cast<const T*>(x),
                                                            static_cast<const T*>(y), static_cast<T*>(grad_x), n);
  });
  EMBER_CUDA_LAUNCHED("unary kernel");
}

}  // namespace

#define EMBER_DEFINE_CUDA_UNARY(name, Functor, ...)                                                         \
  void unary_forward(const math::Functor& f, int device, int dtype, const void* x, void* y, int64_t n) {    \
    launch_forward(f, device, dtype, x, y, n);                                                              \
  }                                                                                                         \
  void unary_backward(const math::Functor& f, int device, int dtype, const void* grad, const void* x,       \
                      const void* y, void* grad_x, int64_t n) {                                             \
    launch_backward(f, device, dtype, grad, x, y, grad_x, n);                                               \
  }
EMBER_UNARY_OPS(EMBER_DEFINE_CUDA_UNARY)
EMBER_UNARY_PARAM_OPS(EMBER_DEFINE_CUDA_UNARY)
#undef EMBER_DEFINE_CUDA_UNARY

}  // namespace ember::cuda
