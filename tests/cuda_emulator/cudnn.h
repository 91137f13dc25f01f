// A stand-in for <cudnn.h> in the CPU emulator: handles, 4-d tensor descriptors, and the softmax
// forward and backward of cuda/cudnn_softmax.cu (cudnn.cpp), with NVIDIA's documented meaning:
//
//   forward:  y = alpha * softmax(x) + beta * y, softmax over C for each (n, h, w)
//             (CUDNN_SOFTMAX_MODE_CHANNEL) or over C, H, W together for each n (MODE_INSTANCE);
//             CUDNN_SOFTMAX_ACCURATE subtracts the maximum first, FAST does not, LOG gives
//             log-softmax.
//   backward, from the forward's output y and the gradient dy:
//             softmax:     dx = alpha * y * (dy - sum(dy * y)) + beta * dx
//             log-softmax: dx = alpha * (dy - exp(y) * sum(dy)) + beta * dx
//   beta == 0: the output is written without being read.
// Sums are taken in double here; cuDNN's own rounding is not emulated.
#pragma once
#include "cuda_runtime.h"

enum cudnnStatus_t : int {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
};
enum cudnnDataType_t : int { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2 };
enum cudnnTensorFormat_t : int { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 };
enum cudnnSoftmaxAlgorithm_t : int { CUDNN_SOFTMAX_FAST = 0, CUDNN_SOFTMAX_ACCURATE = 1, CUDNN_SOFTMAX_LOG = 2 };
enum cudnnSoftmaxMode_t : int { CUDNN_SOFTMAX_MODE_INSTANCE = 0, CUDNN_SOFTMAX_MODE_CHANNEL = 1 };

struct cudnnContext;
using cudnnHandle_t = cudnnContext*;
struct cudnnTensorStruct;
using cudnnTensorDescriptor_t = cudnnTensorStruct*;

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
const char* cudnnGetErrorString(cudnnStatus_t status);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w);

cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                  const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t yDesc, void* y);
cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                   const void* alpha, const cudnnTensorDescriptor_t yDesc, const void* y,
                                   const cudnnTensorDescriptor_t dyDesc, const void* dy, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx);
