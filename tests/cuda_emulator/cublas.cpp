// cuBLAS's GEMMs for the CPU emulator (see cublas_v2.h for the conventions). float32 and float64
// products run on Ember's own CPU GEMM (core/cpu/gemm.h: packed, blocked, SIMD, tested on its own
// against a plain loop), so that the recipe's whole step runs in seconds; the column-major C of
// cuBLAS is the row-major C^T = op(B)^T op(A)^T, read through strides. The mixed-type GEMMs
// (cublasGemmEx on bfloat16) and, with EMBER_EMULATOR_REFERENCE_BLAS=1, every GEMM run the
// reference loop: for each batch b, each column j and row i of C, sum over l in order of
// op(A)(i, l) op(B)(l, j), accumulated in the matrices' own type like cuBLAS (whose order of
// additions differs; bfloat16 read exactly, summed in float32).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>

#include "core/cpu/gemm.h"

#include "cublas_v2.h"
#include "counters.h"
#include "cuda_bf16.h"
#include "state.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

namespace {

thread_local cublasStatus_t detail_status = CUBLAS_STATUS_SUCCESS;
thread_local std::string detail_text;

const char* nvidia_text(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t fail(cublasStatus_t status, const std::string& what) {
  detail_status = status;
  detail_text = std::string(nvidia_text(status)) + " (emulator: " + what + ")";
  return status;
}

// The elements of a column-major rows x cols matrix with leading dimension ld, repeated `batch`
// times `stride` apart, must all lie in device memory.
template <typename T>
bool in_device(const T* p, long long rows, long long cols, long long ld, long long stride, long long batch) {
  if (rows == 0 || cols == 0 || batch == 0) return true;
  long long first = 0, last = (rows - 1) + (cols - 1) * ld;
  if (stride >= 0) last += (batch - 1) * stride;
  else first += (batch - 1) * stride;
  return ember_emu::in_device_memory(p + first, size_t(last - first + 1) * sizeof(T));
}

bool reference_blas() {
  static const bool on = [] {
    const char* env = std::getenv("EMBER_EMULATOR_REFERENCE_BLAS");
    return env != nullptr && env[0] == '1';
  }();
  return on;
}

// A result of the sums' type T stored as C's type Out: a bfloat16 C rounded once, to nearest even.
template <typename Out, typename T>
Out store_as(T value) {
  if constexpr (std::is_same_v<Out, __nv_bfloat16>) return __float2bfloat16_rn(value);
  else return value;
}

// The reference loop (see the top of the file). Out: C's type (T, or bfloat16 with float sums: C read
// exactly, alpha sum + beta C computed in float and rounded once).
template <typename T, typename In, typename Out = T>
void reference_gemm(cublasOperation_t transa, cublasOperation_t transb, long long m, long long n, long long k, T a,
                    const In* A, long long lda, long long strideA, const In* B, long long ldb, long long strideB, T b,
                    Out* C, long long ldc, long long strideC, long long batch, bool read_ab) {
  for (long long p = 0; p < batch; ++p) {
    const In* Ab = A + p * strideA;
    const In* Bb = B + p * strideB;
    Out* Cb = C + p * strideC;
    for (long long j = 0; j < n; ++j) {
      for (long long i = 0; i < m; ++i) {
        T sum = T(0);
        if (read_ab) {
          for (long long l = 0; l < k; ++l) {
            const T x = T(transa == CUBLAS_OP_N ? Ab[i + l * lda] : Ab[l + i * lda]);
            const T y = T(transb == CUBLAS_OP_N ? Bb[l + j * ldb] : Bb[j + l * ldb]);
            sum += x * y;
          }
        }
        Out& c = Cb[i + j * ldc];
        c = store_as<Out>(b == T(0) ? a * sum : a * sum + b * T(c));  // beta == 0: C is not read
      }
    }
  }
}

// The same product on Ember's CPU GEMM. Column-major C (m x n, ldc) is row-major C^T (n x m, rows
// ldc apart): C^T = op(B)^T op(A)^T, with op(B)^T(j, l) = op(B)(l, j) and op(A)^T(l, i) = op(A)(i, l).
template <typename T>
void cpu_gemm(cublasOperation_t transa, cublasOperation_t transb, long long m, long long n, long long k, T a,
              const T* A, long long lda, long long strideA, const T* B, long long ldb, long long strideB, T b, T* C,
              long long ldc, long long strideC, long long batch) {
  // op(B)(l, j): B[l + j ldb] (N) or B[j + l ldb] (T): as the left operand, row j, column l.
  const long long left_rs = transb == CUBLAS_OP_N ? ldb : 1, left_cs = transb == CUBLAS_OP_N ? 1 : ldb;
  // op(A)(i, l): A[i + l lda] (N) or A[l + i lda] (T): as the right operand, row l, column i.
  const long long right_rs = transa == CUBLAS_OP_N ? lda : 1, right_cs = transa == CUBLAS_OP_N ? 1 : lda;
  if (batch == 1)
    ember::cpu::gemm(n, m, k, a, B, left_rs, left_cs, A, right_rs, right_cs, b, C, ldc);
  else
    ember::cpu::gemm_batched(batch, n, m, k, a, B, strideB, left_rs, left_cs, A, strideA, right_rs, right_cs, b, C,
                             strideC, ldc);
}

// T: the sums' type (and alpha's, beta's); In: A's and B's (bfloat16 for the mixed-type GEMMs, read
// exactly); Out: C's (T, or bfloat16 for a mixed-type GEMM with a bfloat16 C).
template <typename T, typename In = T, typename Out = T>
cublasStatus_t gemm(const char* name, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                    int m, int n, int k, const T* alpha, const In* A, int lda, long long strideA, const In* B, int ldb,
                    long long strideB, const T* beta, Out* C, int ldc, long long strideC, int batch) {
  const std::string call = name;
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, call + ": no handle (cublasCreate)");
  ember_emu::count_launch(name, handle->stream);
  if (!ember_emu::stream_is_valid(handle->stream)) return fail(CUBLAS_STATUS_EXECUTION_FAILED, call + ": the handle's stream is gone");
  auto op_ok = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!op_ok(transa) || !op_ok(transb)) return fail(CUBLAS_STATUS_INVALID_VALUE, call + ": unknown transa / transb");
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, call + ": negative m, n, k or batch count (m=" + std::to_string(m) +
                                                 " n=" + std::to_string(n) + " k=" + std::to_string(k) + ")");
  // A is stored m x k (OP_N) or k x m; B is stored k x n or n x k; C is m x n.
  const long long a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
  const long long b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
  auto at_least = [](long long x) { return x > 1 ? x : 1; };
  if (lda < at_least(a_rows) || ldb < at_least(b_rows) || ldc < at_least(m))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                call + ": a leading dimension is smaller than the rows of its column-major matrix (lda=" +
                    std::to_string(lda) + " for " + std::to_string(a_rows) + " rows, ldb=" + std::to_string(ldb) +
                    " for " + std::to_string(b_rows) + ", ldc=" + std::to_string(ldc) + " for " + std::to_string(m) + ")");
  if (alpha == nullptr || beta == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, call + ": null alpha or beta");
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const T a = *alpha, b = *beta;  // read at the call (host pointer mode), as cuBLAS does
  const bool read_ab = a != T(0) && k > 0;
  if (read_ab && !in_device(A, a_rows, a_cols, lda, strideA, batch))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call + ": A (" + std::to_string(a_rows) + " x " + std::to_string(a_cols) +
                                                 ", lda " + std::to_string(lda) + ") is not all in device memory");
  if (read_ab && !in_device(B, b_rows, b_cols, ldb, strideB, batch))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call + ": B (" + std::to_string(b_rows) + " x " + std::to_string(b_cols) +
                                                 ", ldb " + std::to_string(ldb) + ") is not all in device memory");
  if (!in_device(C, m, n, ldc, strideC, batch))
    return fail(CUBLAS_STATUS_INVALID_VALUE, call + ": C (" + std::to_string(m) + " x " + std::to_string(n) + ", ldc " +
                                                 std::to_string(ldc) + ") is not all in device memory");
  // The product runs when the handle's stream gets to it (streams.cpp); in dry mode, nothing does.
  if (ember_emu::dry_mode()) {
    const cudaError_t queued = ember_emu::enqueue(handle->stream, [] { return cudaSuccess; });
    return queued == cudaSuccess ? CUBLAS_STATUS_SUCCESS : fail(CUBLAS_STATUS_EXECUTION_FAILED, call + ": " + cudaGetErrorString(queued));
  }
  const cudaError_t queued = ember_emu::enqueue(handle->stream, [=] {
    ember_emu::DeviceAccess access;
    // alpha == 0 or k == 0: A and B are not read (their NaNs must not reach C), as in cuBLAS.
    if constexpr (std::is_same_v<T, In> && std::is_same_v<T, Out>) {
      if (read_ab && !reference_blas()) {
        try {
          cpu_gemm<T>(transa, transb, m, n, k, a, A, lda, strideA, B, ldb, strideB, b, C, ldc, strideC, batch);
        } catch (const std::exception& e) {
          return ember_emu::set_error(cudaErrorLaunchFailure, call + ": " + e.what());
        }
        return cudaSuccess;
      }
    }
    reference_gemm<T, In, Out>(transa, transb, m, n, k, a, A, lda, strideA, B, ldb, strideB, b, C, ldc, strideC, batch,
                          read_ab);
    return cudaSuccess;
  });
  if (queued != cudaSuccess) return fail(CUBLAS_STATUS_EXECUTION_FAILED, call + ": " + cudaGetErrorString(queued));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: null handle pointer");
  if (ember_emu::device_count() == 0) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate: no device");
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: no handle");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: no handle");
  if (!ember_emu::stream_is_valid(stream)) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: unknown stream");
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode: no handle");
  if (mode < CUBLAS_DEFAULT_MATH || mode > CUBLAS_TF32_TENSOR_OP_MATH)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode: unknown mode");
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  if (status == detail_status && status != CUBLAS_STATUS_SUCCESS) return detail_text.c_str();
  return nvidia_text(status);
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  return gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                           const double* beta, double* C, int ldc) {
  return gemm("cublasDgemm", handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC, int batchCount) {
  return gemm("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
              beta, C, ldc, strideC, batchCount);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb, long long int strideB,
                                         const double* beta, double* C, int ldc, long long int strideC,
                                         int batchCount) {
  return gemm("cublasDgemmStridedBatched", handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
              beta, C, ldc, strideC, batchCount);
}

namespace {

// The mixed-type GEMMs: A and B both bfloat16 or both float32, C float32 (or bfloat16, with bfloat16 A and B),
// computed in float32.
cublasStatus_t gemm_ex(const char* name, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                       int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                       long long strideA, const void* B, cudaDataType Btype, int ldb, long long strideB,
                       const void* beta, void* C, cudaDataType Ctype, int ldc, long long strideC, int batch,
                       cublasComputeType_t compute) {
  const std::string call = name;
  if (compute != CUBLAS_COMPUTE_32F || Atype != Btype || (Atype != CUDA_R_16BF && Atype != CUDA_R_32F) ||
      (Ctype != CUDA_R_32F && !(Ctype == CUDA_R_16BF && Atype == CUDA_R_16BF)))
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, call + ": only A, B in CUDA_R_16BF or CUDA_R_32F, C in CUDA_R_32F (or "
                                                    "CUDA_R_16BF with CUDA_R_16BF A, B) and CUBLAS_COMPUTE_32F are "
                                                    "emulated");
  const float* a = static_cast<const float*>(alpha);
  const float* b = static_cast<const float*>(beta);
  if (Ctype == CUDA_R_16BF)
    return gemm<float, __nv_bfloat16, __nv_bfloat16>(name, handle, transa, transb, m, n, k, a,
                                                     static_cast<const __nv_bfloat16*>(A), lda, strideA,
                                                     static_cast<const __nv_bfloat16*>(B), ldb, strideB, b,
                                                     static_cast<__nv_bfloat16*>(C), ldc, strideC, batch);
  float* c = static_cast<float*>(C);
  if (Atype == CUDA_R_16BF)
    return gemm<float, __nv_bfloat16>(name, handle, transa, transb, m, n, k, a, static_cast<const __nv_bfloat16*>(A),
                                      lda, strideA, static_cast<const __nv_bfloat16*>(B), ldb, strideB, b, c, ldc,
                                      strideC, batch);
  return gemm<float>(name, handle, transa, transb, m, n, k, a, static_cast<const float*>(A), lda, strideA,
                     static_cast<const float*>(B), ldb, strideB, b, c, ldc, strideC, batch);
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                 Ctype, ldc, 0, 1, computeType);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
                 ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}
