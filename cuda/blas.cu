// GEMM through cuBLAS: one handle per device, bound to the device's current stream.
// Ember is row-major and cuBLAS column-major: a row-major M x N matrix C is, read column-major, the
// N x M matrix C^T, so C = A B is computed as C^T = B^T A^T: cuBLAS is called with B first and M, N
// swapped. A row-major operand (column stride 1) is passed untransposed with ld = its row stride; a
// transposed view (row stride 1) is passed with CUBLAS_OP_T and ld = its column stride. Batches go
// to cublas{S,D}gemmStridedBatched (batch stride 0 repeats a broadcast operand).
// TF32 is off unless set_allow_tf32(true): float32 results then match the CPU to rounding.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cublas_v2.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/cuda_ops.h"
#include "cuda/launch.h"

#define EMBER_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                       \
    cublasStatus_t ember_status_ = (call);                                                                   \
    if (ember_status_ != CUBLAS_STATUS_SUCCESS)                                                              \
      ::ember::cuda::raise_error("cuBLAS", #call, __FILE__, __LINE__,                                        \
                                 ::ember::cuda::cublas_status_string(int(ember_status_)));                   \
  } while (0)

namespace ember::cuda {
namespace {

std::atomic<bool> tf32{false};

cublasHandle_t handle_for(int device) {
  static cublasHandle_t handles[16] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (handles[device] == nullptr) EMBER_CUBLAS_CHECK(cublasCreate(&handles[device]));
  return handles[device];
}

// How cuBLAS sees one row-major operand with element strides (rs, cs): its op and leading dim.
struct BlasOperand {
  cublasOperation_t op;
  int64_t ld;
};
BlasOperand blas_operand(int64_t rs, int64_t cs, int64_t rows, int64_t cols, const char* which) {
  if (cs == 1 && rs >= (cols > 1 ? cols : 1)) return {CUBLAS_OP_N, rs};
  if (rs == 1 && cs >= (rows > 1 ? rows : 1)) return {CUBLAS_OP_T, cs};
  (void)which;
  raise_message("gemm (CUDA): an operand needs unit stride along rows or columns and a valid leading dimension "
                "(the caller copies it to contiguous first)");
}

}  // namespace

const char* cublas_status_string(int status) { return cublasGetStatusString(cublasStatus_t(status)); }

void set_allow_tf32(bool allow) { tf32 = allow; }
bool allow_tf32() { return tf32; }

void gemm(int device, bool float64, int64_t batch, int64_t M, int64_t N, int64_t K, const void* A, int64_t a_rs,
          int64_t a_cs, int64_t a_bs, const void* B, int64_t b_rs, int64_t b_cs, int64_t b_bs, double beta, void* C,
          int64_t ldc, int64_t c_bs) {
  if (batch == 0 || M == 0 || N == 0) return;
  cudaStream_t stream = use_device(device);
  cublasHandle_t handle = handle_for(device);
  EMBER_CUBLAS_CHECK(cublasSetStream(handle, stream));
  EMBER_CUBLAS_CHECK(cublasSetMathMode(handle, !float64 && tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  if (K == 0) {
    // Nothing to multiply: C = beta * C. cuBLAS does exactly that with k = 0.
    a_rs = 1, a_cs = M > 1 ? M : 1, b_rs = 1, b_cs = 1;
  }
  const BlasOperand a = blas_operand(a_rs, a_cs, M, K, "A");
  const BlasOperand b = blas_operand(b_rs, b_cs, K, N, "B");
  // C^T (N x M) = B^T (N x K) A^T (K x M): "B^T" is B's row-major memory read column-major, untransposed.
  const int m = int(N), n = int(M), k = int(K);
  if (float64) {
    const double alpha = 1.0, beta_d = beta;
    if (batch == 1)
      EMBER_CUBLAS_CHECK(cublasDgemm(handle, b.op, a.op, m, n, k, &alpha, static_cast<const double*>(B), int(b.ld),
                                     static_cast<const double*>(A), int(a.ld), &beta_d, static_cast<double*>(C), int(ldc)));
    else
      EMBER_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, b.op, a.op, m, n, k, &alpha, static_cast<const double*>(B),
                                                   int(b.ld), b_bs, static_cast<const double*>(A), int(a.ld), a_bs,
                                                   &beta_d, static_cast<double*>(C), int(ldc), c_bs, int(batch)));
  } else {
    const float alpha = 1.0f, beta_f = float(beta);
    if (batch == 1)
      EMBER_CUBLAS_CHECK(cublasSgemm(handle, b.op, a.op, m, n, k, &alpha, static_cast<const float*>(B), int(b.ld),
                                     static_cast<const float*>(A), int(a.ld), &beta_f, static_cast<float*>(C), int(ldc)));
    else
      EMBER_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, b.op, a.op, m, n, k, &alpha, static_cast<const float*>(B),
                                                   int(b.ld), b_bs, static_cast<const float*>(A), int(a.ld), a_bs,
                                                   &beta_f, static_cast<float*>(C), int(ldc), c_bs, int(batch)));
  }
}

}  // namespace ember::cuda
