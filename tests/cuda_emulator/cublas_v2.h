// A stand-in for cuBLAS's <cublas_v2.h> in the CPU emulator: the handle, stream and math-mode
// calls, status strings, the four GEMMs cuda/blas.cu calls and the two mixed-type ones of
// cuda/blas_bf16.cu (cublasGemmEx, cublasGemmStridedBatchedEx: bfloat16 or float32 A and B, float32 C (or bfloat16 with bfloat16 A, B),
// CUBLAS_COMPUTE_32F only; the bfloat16 values are read exactly and summed in float32), computed
// (cublas.cpp) by Ember's CPU GEMM for float32 and float64, by a plain reference loop for bfloat16,
// with exactly cuBLAS's column-major conventions:
//
//   C = alpha * op(A) op(B) + beta * C,   C m x n,  op(A) m x k,  op(B) k x n,
//   element (i, j) of a column-major matrix X with leading dimension ldX is X[i + j * ldX],
//   op(X) = X (CUBLAS_OP_N) or X^T (CUBLAS_OP_T / _C, the same for real numbers),
//   beta == 0: C is written without being read (it may hold NaN); alpha == 0: A, B not read.
//
// Like cuBLAS it rejects a bad call with CUBLAS_STATUS_INVALID_VALUE (negative sizes, a leading
// dimension smaller than the rows of the matrix as stored); beyond cuBLAS, it also checks that
// every element it would touch lies in device memory (the row-major to column-major mapping of
// cuda/blas.cu is where a mistake would show), and says what was wrong in
// cublasGetStatusString. TF32 math mode computes in full float32 here.
#pragma once
#include "cuda_runtime.h"

enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t : int {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
};

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc);
cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                           const double* beta, double* C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC, int batchCount);
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb, long long int strideB,
                                         const double* beta, double* C, int ldc, long long int strideC,
                                         int batchCount);

// ---- Mixed types (library_types.h and cublas_api.h in the real toolkit; NVIDIA's numbers).
enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;
enum cublasComputeType_t : int { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t : int { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo);
