// The chip's own bfloat16 matrix rate, the denominator of model FLOP utilisation (bench/gemm_peak.cpp):
// one cuBLAS product of compact bfloat16 A and B into a float32 C, summed in float32
// (CUBLAS_COMPUTE_32F: tensor cores on a GPU), with nothing around it. Ember's own bfloat16 products
// (cuda/blas_bf16.cu) make the same call after converting their operands; timing them would measure
// the conversions too, and this file's handle keeps the measurement out of theirs.
#include <cublas_v2.h>

#include <cstdint>
#include <mutex>

#include "core/cuda_ops.h"
#include "cuda/check.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

cublasHandle_t rate_handle(int device) {
  static cublasHandle_t handles[16] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0 || device >= 16) raise_message("gemm_bf16_bare: device index out of range [0, 16)");
  if (handles[device] == nullptr) EMBER_CUBLAS_CHECK(cublasCreate(&handles[device]));
  return handles[device];
}

}  // namespace

void gemm_bf16_bare(int device, int64_t M, int64_t N, int64_t K, const void* A, const void* B, float* C) {
  if (M <= 0 || N <= 0 || K <= 0) raise_message("gemm_bf16_bare: M, N and K must be positive");
  cudaStream_t stream = use_device(device);
  cublasHandle_t handle = rate_handle(device);
  EMBER_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // Row-major C = A B as column-major C^T = B^T A^T (cuda/blas.cu's mapping): B first, M and N swapped.
  const float alpha = 1.0f, beta = 0.0f;
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, B,
                                                CUDA_R_16BF, int(N), 0, A, CUDA_R_16BF, int(K), 0, &beta, C, CUDA_R_32F,
                                                int(N), 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace ember::cuda
