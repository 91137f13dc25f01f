// Checked CUDA, cuBLAS and cuDNN calls: a failure raises ember::Error naming the call, the file and
// line, and the library's own message. The message is built by host C++ (cuda/errors.cpp), so the .cu
// files that include this need neither fmt nor core/error.h. EMBER_CUBLAS_CHECK and EMBER_CUDNN_CHECK
// name the libraries' types only when they are used: a file using them includes <cublas_v2.h> or
// <cudnn.h> itself, and the others do not depend on those libraries.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

// Throws ember::Error: "<library> error: <call> failed at <file>:<line>: <message>".
[[noreturn]] void raise_error(const char* library, const char* call, const char* file, int line, const char* message);
// Throws ember::Error for a failed CUDA runtime call (`code`, cudaGetErrorString's `text`). A kernel's
// fault (codes 700-719: an illegal address or instruction, a device assert, a launch failure) comes
// asynchronously, at a later call: its message says so and names the kernels launched last (a
// graph's replay names the graph); EMBER_CUDA_SYNC=1 reports it at the kernel's own launch. Any
// other code: raise_error's message.
[[noreturn]] void raise_cuda_error(int code, const char* text, const char* call, const char* file, int line);
// Notes a kernel (or a graph) just launched, for raise_cuda_error: a few atomic stores, no lock.
void note_launch(const char* what);
// What a graph's replay notes (cuda/graph.cu): a fault after it is in one of the graph's kernels,
// which EMBER_CUDA_SYNC=1 cannot name (a launch inside a capture is not waited for).
inline constexpr char kGraphReplayLaunch[] = "a CUDA graph's replay (its kernels, captured)";
// Throws ember::Error with `message` as it is.
[[noreturn]] void raise_message(const char* message);
// Throws ember::Error: out of GPU memory on cuda:<device>, with the bytes asked for and in use.
[[noreturn]] void raise_out_of_memory(int device, size_t requested, int64_t allocated, int64_t reserved,
                                      size_t free_bytes, size_t total_bytes);
// cuBLAS's name for a status code (cuda/blas.cu).
const char* cublas_status_string(int status);

}  // namespace ember::cuda

#define EMBER_CUDA_CHECK(call)                                                                       \
  do {                                                                                               \
    cudaError_t ember_status_ = (call);                                                              \
    if (ember_status_ != cudaSuccess) {                                                              \
      const char* ember_text_ = cudaGetErrorString(ember_status_);                                   \
      cudaGetLastError(); /* the error is raised: a caller that goes on must not see it again */     \
      ::ember::cuda::raise_cuda_error(int(ember_status_), ember_text_, #call, __FILE__, __LINE__);     \
    }                                                                                                \
  } while (0)

#define EMBER_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                       \
    cublasStatus_t ember_status_ = (call);                                                                   \
    if (ember_status_ != CUBLAS_STATUS_SUCCESS)                                                              \
      ::ember::cuda::raise_error("cuBLAS", #call, __FILE__, __LINE__,                                        \
                                 ::ember::cuda::cublas_status_string(int(ember_status_)));                   \
  } while (0)

#define EMBER_CUDNN_CHECK(call)                                                                   \
  do {                                                                                            \
    cudnnStatus_t ember_status_ = (call);                                                         \
    if (ember_status_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::ember::cuda::raise_error("cuDNN", #call, __FILE__, __LINE__, cudnnGetErrorString(ember_status_)); \
  } while (0)
