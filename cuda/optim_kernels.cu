// The optimisers' update on the GPU: Adam and AdamW as one fused multi-tensor kernel. Up to 32
// parameters travel in the kernel's arguments (pointers, sizes, weight decays); each thread takes
// flat indices over all of them and finds its tensor by a scan of the (at most 32) offsets.
// Same arithmetic, element by element, as the CPU loop in optim/optimizer.cpp.
// NOTE: compiled by CI with nvcc, but not yet run on a GPU (see docs/cuda.md).
#include <cmath>

#include "core/cuda_ops.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

constexpr int kMaxTensors = 32;

struct AdamBatch {
  void* params[kMaxTensors];
  const void* grads[kMaxTensors];
  void* m[kMaxTensors];
  void* v[kMaxTensors];
  double weight_decay[kMaxTensors];
  int64_t offsets[kMaxTensors + 1];  // offsets[t] = elements before tensor t
  int count;
};

template <typename T>
__global__ void adam_kernel(AdamBatch batch, AdamHyper h) {
  const int64_t total = batch.offsets[batch.count];
  const T b1 = T(h.beta1), b2 = T(h.beta2), step_size = T(h.lr / h.correction1);
  const T inv_sqrt_c2 = T(1.0 / std::sqrt(h.correction2)), eps = T(h.eps);
  EMBER_CUDA_LOOP(i, total) {
    int t = 0;
    while (batch.offsets[t + 1] <= i) ++t;
    const int64_t j = i - batch.offsets[t];
    T* p = static_cast<T*>(batch.params[t]);
    T* m = static_cast<T*>(batch.m[t]);
    T* v = static_cast<T*>(batch.v[t]);
    const double wd = batch.weight_decay[t];
    T g = static_cast<const T*>(batch.grads[t])[j];
    T pj = p[j];
    if (h.decoupled) pj *= T(1.0 - h.lr * wd);
    else g += T(wd) * pj;
    const T mj = b1 * m[j] + (T(1) - b1) * g;
    const T vj = b2 * v[j] + (T(1) - b2) * g * g;
    m[j] = mj;
    v[j] = vj;
    p[j] = pj - step_size * mj / (std::sqrt(vj) * inv_sqrt_c2 + eps);
  }
}

}  // namespace

void adam_step(int device, bool float64, int count, void* const* params, const void* const* grads, void* const* m,
               void* const* v, const int64_t* sizes, const double* weight_decays, const AdamHyper& hyper) {
  cudaStream_t stream = use_device(device);
  for (int first = 0; first < count; first += kMaxTensors) {
    AdamBatch batch{};
    batch.count = count - first < kMaxTensors ? count - first : kMaxTensors;
    batch.offsets[0] = 0;
    for (int t = 0; t < batch.count; ++t) {
      batch.params[t] = params[first + t];
      batch.grads[t] = grads[first + t];
      batch.m[t] = m[first + t];
      batch.v[t] = v[first + t];
      batch.weight_decay[t] = weight_decays[first + t];
      batch.offsets[t + 1] = batch.offsets[t] + sizes[first + t];
    }
    const int64_t total = batch.offsets[batch.count];
    if (total == 0) continue;
    if (float64)
      adam_kernel<double><<<blocks_for(total), kThreads, 0, stream>>>(batch, hyper);
    else
      adam_kernel<float><<<blocks_for(total), kThreads, 0, stream>>>(batch, hyper);
    EMBER_CUDA_LAUNCHED("adam_kernel");
  }
}

}  // namespace ember::cuda
