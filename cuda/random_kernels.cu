// Random fills on the GPU (kernel::random_fill, declared in core/kernels.h): uniform_ and normal_ of
// a tensor that lives there. Element i is the pure function of (seed, first + i) in core/random.h
// that the CPU's loop calls, so a seed gives the same tensor on either device (no cuRAND, whose
// streams the CPU could not reproduce).
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/random.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

// data[i] = uniform_element or normal_element(seed, first, i, a, b) (core/random.h: uniform on [a, b), or
// normal with mean a and std b; counter-based, the CPU's formulas); a grid-stride loop, a thread per element.
template <typename T>
__global__ void random_fill_kernel(T* data, int64_t n, bool normal, uint64_t seed, uint64_t first, double a,
                                   double b) {
  EMBER_CUDA_LOOP(i, n) {
    data[i] = T(normal ? normal_element(seed, first, uint64_t(i), a, b) : uniform_element(seed, first, uint64_t(i), a, b));
  }
}

}  // namespace

void random_fill(const On& on, void* data, int64_t n, bool normal, uint64_t seed, uint64_t first, double a,
                 double b) {
  if (n == 0) return;
  cudaStream_t stream = use_device(on.device);
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    random_fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, normal, seed, first, a, b);
  });
  EMBER_CUDA_LAUNCHED("random_fill_kernel");
}

}  // namespace ember::cuda
