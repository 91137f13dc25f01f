// GEMM through cuBLAS: one handle per device, bound to the device's current stream.
// Ember is row-major and cuBLAS column-major: a row-major M x N matrix C is, read column-major, the
// N x M matrix C^T, so C = A B is computed as C^T = B^T A^T: cuBLAS is called with B first and M, N
// swapped. A row-major operand (column stride 1) is passed untransposed with ld = its row stride; a
// transposed view (row stride 1) is passed with CUBLAS_OP_T and ld = its column stride. Batches go
// to cublas{S,D}gemmStridedBatched (batch stride 0 repeats a broadcast operand).
// TF32 is off unless set_allow_tf32(true): float32 results then match the CPU to rounding.
// On it, the products of core/kernels.h: linear (the bias copied into y first, the GEMM adding to it)
// and the strided batched matmul (float32 operands as bfloat16: gemm_bf16, cuda/blas_bf16.cu).
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cublas_v2.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/check.h"
#include "cuda/launch.h"

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

void linear_forward(const On& on, const void* x, const void* w, const void* bias, void* y, int64_t rows, int64_t K,
                    int64_t N) {
  double beta = 0.0;
  if (bias != nullptr) {  // y starts as the bias on every row (y seen as [rows, N], the bias broadcast along rows)
    Shape8 shape;
    shape.ndim = 2;
    shape.size[0] = rows, shape.size[1] = N;
    Operand to, from;
    to.data = y, from.data = const_cast<void*>(bias);
    to.dtype = from.dtype = on.dtype;
    to.stride[0] = rows == 1 ? 0 : N;
    to.stride[1] = from.stride[1] = N == 1 ? 0 : 1;
    copy(on.device, shape, to, from);
    beta = 1.0;
  }
  // W^T(k, n) = W[n, k]: the weight read with swapped strides.
  gemm(on.device, on.float64(), 1, rows, N, K, x, K, 1, 0, w, 1, K, 0, beta, y, N, 0);
}

void linear_backward(const On& on, const void* g, const void* x, const void* w, void* dx, void* dw, int64_t rows,
                     int64_t K, int64_t N) {
  if (dx != nullptr)  // dx [rows, K] = g [rows, N] W [N, K]
    gemm(on.device, on.float64(), 1, rows, K, N, g, N, 1, 0, w, K, 1, 0, 0.0, dx, K, 0);
  if (dw != nullptr)  // dW [N, K] = g^T [N, rows] x [rows, K]
    gemm(on.device, on.float64(), 1, N, K, rows, g, 1, N, 0, x, K, 1, 0, 0.0, dw, K, 0);
}

void matmul(const On& on, bool bf16, int64_t batch, int64_t M, int64_t N, int64_t K, const void* A, int64_t a_bs,
            int64_t a_rs, int64_t a_cs, const void* B, int64_t b_bs, int64_t b_rs, int64_t b_cs, void* C, int64_t c_bs,
            int64_t ldc) {
  if (bf16 && on.dtype == kFloat32)
    return gemm_bf16(on.device, batch, M, N, K, static_cast<const float*>(A), a_rs, a_cs, a_bs,
                     static_cast<const float*>(B), b_rs, b_cs, b_bs, 0.0, static_cast<float*>(C), ldc, c_bs);
  gemm(on.device, on.float64(), batch, M, N, K, A, a_rs, a_cs, a_bs, B, b_rs, b_cs, b_bs, 0.0, C, ldc, c_bs);
}

// cuBLAS takes an operand with one leading dimension (blas_operand above); a call costs the host microseconds.
MatmulReads matmul_reads(const On&) { return MatmulReads{true, true}; }

}  // namespace ember::cuda
