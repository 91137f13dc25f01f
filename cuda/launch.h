// Shared by the .cu files: the current stream of each device, launch sizes, and the check after a launch.
// CUDA-only (included by cuda/*.cu alone); C++17, no fmt, no Tensor.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/check.h"

namespace ember::cuda {

// The stream every kernel, copy and cuBLAS call of `device` runs on (one per device, created on
// first use). Work on it runs in order, so a block the caching allocator hands out again is never
// still in use by an earlier kernel.
cudaStream_t current_stream(int device);

constexpr int kThreads = 256;
inline int blocks_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 8192 ? (blocks < 1 ? 1 : blocks) : 8192);
}

// After a launch: raises the launch error, if any; with launch_sync() on (EMBER_CUDA_SYNC=1 in the
// environment, core/cuda_ops.h) it also waits for the kernel, so that an error in it is reported at
// the op that caused it, except while the stream captures a CUDA graph (the kernel is checked at
// the graph's replay).
void check_launch(const char* what, const char* file, int line);
#define EMBER_CUDA_LAUNCHED(what) ::ember::cuda::check_launch(what, __FILE__, __LINE__)

// Makes `device` current and returns its stream.
cudaStream_t use_device(int device);

// The caching allocator's side of a graph capture (cuda/runtime.cu; used by cuda/graph.cu): a pool
// for the capture's blocks, no cudaMalloc while it runs, the pool kept until the graph goes.
int allocator_begin_capture(int device);
void allocator_end_capture(int device);
void allocator_release_pool(int device, int pool);

// Grid-stride loop over [0, n).
#define EMBER_CUDA_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

}  // namespace ember::cuda
