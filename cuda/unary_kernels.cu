// Element-wise math on the GPU (contiguous operands; core/ops/unary.cpp makes them so): a grid-stride forward kernel y = f(x) and a backward kernel
// grad_x = grad * f'(x, y), instantiated for every functor of core/unary_math.h (EMBER_HD makes
// each functor __host__ __device__, so the GPU runs the very formulas the CPU tests check).
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include "core/cuda_ops.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

template <typename T, typename F>
__global__ void forward_kernel(F f, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = f.f(x[i]);
}

template <typename T, typename F>
__global__ void backward_kernel(F f, const T* grad, const T* x, const T* y, T* grad_x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    grad_x[i] = grad[i] * f.df(x[i], y[i]);
}

template <typename F>
void launch_forward(const F& f, int device, bool float64, const void* x, void* y, int64_t n) {
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  if (float64)
    forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const double*>(x), static_cast<double*>(y), n);
  else
    forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const float*>(x), static_cast<float*>(y), n);
  EMBER_CUDA_LAUNCHED("unary kernel");
}

template <typename F>
void launch_backward(const F& f, int device, bool float64, const void* grad, const void* x, const void* y,
                     void* grad_x, int64_t n) {
  if (n == 0) return;
  cudaStream_t stream = use_device(device);
  if (float64)
    backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const double*>(grad), static_cast<const double*>(x),
                                                 static_cast<const double*>(y), static_cast<double*>(grad_x), n);
  else
    backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, static_cast<const float*>(grad), static_cast<const float*>(x),
                                                 static_cast<const float*>(y), static_cast<float*>(grad_x), n);
  EMBER_CUDA_LAUNCHED("unary kernel");
}

}  // namespace

#define EMBER_DEFINE_CUDA_UNARY(name, Functor, ...)                                                         \
  void unary_forward(const math::Functor& f, int device, bool float64, const void* x, void* y, int64_t n) { \
    launch_forward(f, device, float64, x, y, n);                                                            \
  }                                                                                                         \
  void unary_backward(const math::Functor& f, int device, bool float64, const void* grad, const void* x,    \
                      const void* y, void* grad_x, int64_t n) {                                             \
    launch_backward(f, device, float64, grad, x, y, grad_x, n);                                             \
  }
EMBER_UNARY_OPS(EMBER_DEFINE_CUDA_UNARY)
EMBER_UNARY_PARAM_OPS(EMBER_DEFINE_CUDA_UNARY)
#undef EMBER_DEFINE_CUDA_UNARY

}  // namespace ember::cuda
