// Checked CUDA calls: a failure raises ember::Error naming the call, the file and line, and CUDA's message.
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

#define EMBER_CUDA_CHECK(call)                                                                       \
  do {                                                                                               \
    cudaError_t ember_status_ = (call);                                                              \
    if (ember_status_ != cudaSuccess)                                                                \
      ::ember::fail("CUDA error: {} failed at {}:{}: {}", #call, __FILE__, __LINE__,                 \
                    cudaGetErrorString(ember_status_));                                              \
  } while (0)
