// Checked CUDA and library calls: a failure raises ember::Error naming the call, the file and line,
// and the library's own message. The message is built by host C++ (cuda/errors.cpp), so the .cu
// files that include this need neither fmt nor core/error.h.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

// Throws ember::Error: "<library> error: <call> failed at <file>:<line>: <message>".
[[noreturn]] void raise_error(const char* library, const char* call, const char* file, int line, const char* message);
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
    if (ember_status_ != cudaSuccess)                                                                \
      ::ember::cuda::raise_error("CUDA", #call, __FILE__, __LINE__, cudaGetErrorString(ember_status_)); \
  } while (0)
