// Embedding on the GPU (the kernels of core/kernels.h): the forward gathers rows; the backward adds each vocabulary row's gradient
// from its positions in position order (the buckets come from the host, built exactly as the CPU
// builds them), one block per distinct row and one thread per column: no atomics, so repeated ids
// sum deterministically, in the same order as on the CPU.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

// out[r, c] = weight[ids[r], c] (weight read through its strides); a grid-stride loop over the n * D
// outputs, a thread per element.
template <typename T>
__global__ void gather_kernel(const T* weight, int64_t w_rs, int64_t w_cs, const int64_t* ids, int64_t n, int64_t D,
                              T* out) {
  EMBER_CUDA_LOOP(i, n * D) {
    const int64_t row = i / D, col = i % D;
    out[i] = weight[ids[row] * w_rs + col * w_cs];
  }
}

// dweight[rows[k], :] += the grad rows of id rows[k] (positions[starts[k] .. starts[k + 1])), summed in
// that order: one block per distinct id, its threads striding over the D columns; no atomics.
template <typename T>
__global__ void scatter_kernel(const T* grad, const int64_t* rows, const int64_t* starts, const int64_t* positions,
                               int64_t D, T* dweight, const int64_t* count) {
  const int64_t k = blockIdx.x;
  if (count != nullptr && k >= *count) return;  // a graph's step: launched for the most rows a batch can have
  T* out = dweight + rows[k] * D;
  const int64_t begin = starts[k], end = starts[k + 1];
  for (int64_t col = threadIdx.x; col < D; col += blockDim.x) {
    T acc = out[col];
    for (int64_t p = begin; p < end; ++p) acc += grad[positions[p] * D + col];
    out[col] = acc;
  }
}

}  // namespace

void embedding_forward(const On& on, const void* weight, int64_t w_rs, int64_t w_cs, const int64_t* ids, int64_t n,
                       int64_t D, void* out) {
  if (n * D == 0) return;
  cudaStream_t stream = use_device(on.device);
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<<<blocks_for(n * D), kThreads, 0, stream>>>(static_cast<const T*>(weight), w_rs, w_cs, ids, n, D,
                                                              static_cast<T*>(out));
  });
  EMBER_CUDA_LAUNCHED("gather_kernel");
}

void embedding_backward(const On& on, const void* grad, const int64_t* rows, const int64_t* starts,
                        const int64_t* positions, int64_t nrows, int64_t D, void* dweight, const int64_t* count) {
  if (nrows == 0 || D == 0) return;
  if (nrows > 2147483647) raise_message("embedding backward: too many distinct ids for the CUDA kernel");
  cudaStream_t stream = use_device(on.device);
  int threads = D >= 256 ? 256 : (D >= 128 ? 128 : (D >= 64 ? 64 : 32));
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    scatter_kernel<<<unsigned(nrows), threads, 0, stream>>>(static_cast<const T*>(grad), rows, starts, positions, D,
                                                            static_cast<T*>(dweight), count);
  });
  EMBER_CUDA_LAUNCHED("scatter_kernel");
}

}  // namespace ember::cuda
