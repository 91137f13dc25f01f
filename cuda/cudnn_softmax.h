// Softmax and log-softmax of contiguous rows [rows, n] through cuDNN (cuda/cudnn_softmax.cu): the
// route cuda/softmax_kernels.cu's softmax kernel (core/kernels.h) takes instead of its own row kernels
// when softmax_cudnn() is on (set_softmax_cudnn(true), or EMBER_SOFTMAX=cudnn in the environment).
// CUDA-only (included by cuda/*.cu alone); C++17, no fmt, no Tensor.
#pragma once
#include <cstdint>

namespace ember::cuda {

void cudnn_softmax_forward(int device, bool float64, const void* x, void* y, int64_t rows, int64_t n, bool log);
void cudnn_softmax_backward(int device, bool float64, const void* grad, const void* y, void* dx, int64_t rows,
                            int64_t n, bool log);

}  // namespace ember::cuda
