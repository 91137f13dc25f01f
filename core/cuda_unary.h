// The element-wise math ops on a CUDA device: one forward and one backward kernel per functor
// of core/unary_math.h, the same functors the CPU loop runs (cuda/unary_kernels.cu).
// Raw pointers only, so the .cu file needs neither Tensor nor fmt; core/ops/unary.cpp routes a
// contiguous CUDA tensor here. n elements of float32 (or float64 when `float64`), on GPU `device`.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/adding-an-op.md).
#pragma once
#include <cstdint>

#include "core/unary_math.h"

namespace ember::cuda {

#define EMBER_DECLARE_CUDA_UNARY(name, Functor)                                                             \
  void unary_forward(const math::Functor& f, int device, bool float64, const void* x, void* y, int64_t n); \
  void unary_backward(const math::Functor& f, int device, bool float64, const void* grad, const void* x,   \
                      const void* y, void* grad_x, int64_t n);
EMBER_UNARY_OPS(EMBER_DECLARE_CUDA_UNARY)
EMBER_DECLARE_CUDA_UNARY(pow, Pow)
EMBER_DECLARE_CUDA_UNARY(add_scalar, AddScalar)
EMBER_DECLARE_CUDA_UNARY(mul_scalar, MulScalar)
#undef EMBER_DECLARE_CUDA_UNARY

}  // namespace ember::cuda
