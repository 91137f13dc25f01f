// cuBLAS, loaded on first use. Linking libcublas makes every process pay for it at start: cuBLASLt's
// static initialisers and the relocation of half a gigabyte of library took 0.45 s of each start
// (`imdb --help`, each test process), GPU or not. So Ember does not link it: this file defines the
// cuBLAS entry points that cuda/blas.cu and cuda/blas_bf16.cu call, and the first call dlopen()s
// the library found at build time (EMBER_CUBLAS_LIBRARY; else the soname through the usual search)
// and forwards every call to the real function. A process that never touches a GPU never loads it.
// To call another cuBLAS function: add one line to EMBER_CUBLAS_FUNCTIONS below (its name, the
// parameters as the header declares them, and the argument names).
// Not in the emulated build: there, the emulator's cublas_v2.h is the implementation.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>

#include "cuda/check.h"

#ifndef EMBER_CUBLAS_LIBRARY
#define EMBER_CUBLAS_LIBRARY "libcublas.so"
#endif
#define EMBER_CUBLAS_TEXT(x) #x
#define EMBER_CUBLAS_SONAME(major) "libcublas.so." EMBER_CUBLAS_TEXT(major)

namespace ember::cuda {
namespace {

void* cublas_library() {
  static void* handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    handle = dlopen(EMBER_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) handle = dlopen(EMBER_CUBLAS_SONAME(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
  });
  if (handle == nullptr) {
    const char* why = dlerror();
    raise_error("cuBLAS", "dlopen", __FILE__, __LINE__,
                why != nullptr ? why : "could not load " EMBER_CUBLAS_LIBRARY " (set LD_LIBRARY_PATH to its folder)");
  }
  return handle;
}

// The real function NAME from the library, looked up once.
template <typename F>
F real_function(const char* name) {
  void* symbol = dlsym(cublas_library(), name);
  if (symbol == nullptr) raise_error("cuBLAS", "dlsym", __FILE__, __LINE__, name);
  return reinterpret_cast<F>(symbol);
}

}  // namespace
}  // namespace ember::cuda

// (return type, exported name, (parameters), (arguments))
#define EMBER_CUBLAS_FUNCTIONS(X)                                                                                \
  X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))                                        \
  X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))         \
  X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))              \
  X(cublasStatus_t, cublasSgemm_v2,                                                                              \
    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha, \
     const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc),                    \
    (handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))                                              \
  X(cublasStatus_t, cublasDgemm_v2,                                                                              \
    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,                     \
     const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta, double* C,     \
     int ldc),                                                                                                   \
    (handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))                                              \
  X(cublasStatus_t, cublasSgemmStridedBatched,                                                                   \
    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha, \
     const float* A, int lda, long long int sa, const float* B, int ldb, long long int sb, const float* beta,     \
     float* C, int ldc, long long int sc, int batch),                                                            \
    (handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch))                           \
  X(cublasStatus_t, cublasDgemmStridedBatched,                                                                   \
    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,                     \
     const double* alpha, const double* A, int lda, long long int sa, const double* B, int ldb,                  \
     long long int sb, const double* beta, double* C, int ldc, long long int sc, int batch),                     \
    (handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch))                           \
  X(cublasStatus_t, cublasGemmStridedBatchedEx,                                                                  \
    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,  \
     const void* A, cudaDataType Atype, int lda, long long int sa, const void* B, cudaDataType Btype, int ldb,   \
     long long int sb, const void* beta, void* C, cudaDataType Ctype, int ldc, long long int sc, int batch,      \
     cublasComputeType_t compute, cublasGemmAlgo_t algo),                                                        \
    (handle, ta, tb, m, n, k, alpha, A, Atype, lda, sa, B, Btype, ldb, sb, beta, C, Ctype, ldc, sc, batch,       \
     compute, algo))                                                                                             \
  X(const char*, cublasGetStatusString, (cublasStatus_t status), (status))

#define EMBER_CUBLAS_FORWARD(result, name, parameters, arguments)                                     \
  extern "C" result name parameters {                                                                  \
    static const auto real = ember::cuda::real_function<result(*) parameters>(#name);                 \
    return real arguments;                                                                             \
  }
EMBER_CUBLAS_FUNCTIONS(EMBER_CUBLAS_FORWARD)
