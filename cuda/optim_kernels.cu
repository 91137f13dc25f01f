// The optimisers' update on the GPU (declared in core/kernels.h): SGD and Adam / AdamW, each as one
// fused multi-tensor kernel; and gradient clipping's two passes (the sum of squares of every
// gradient, then scaling them all), each one launch over all the tensors too.
// Up to 32 tensors travel in the kernel's arguments (pointers, sizes, weight decays); each thread
// takes flat indices over all of them and finds its tensor by a scan of the (at most 32) offsets,
// then applies the per-element rule of core/update_rules.h, the very function the CPU loop of
// core/cpu/optimizer_steps.cpp calls.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cmath>
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/update_rules.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

constexpr int kMaxTensors = 32;

// Up to kMaxTensors tensors of a TensorList, by value (kernel arguments).
struct Batch {
  void* params[kMaxTensors];
  const void* grads[kMaxTensors];
  void* state1[kMaxTensors];  // null entries when the optimiser keeps no such state
  void* state2[kMaxTensors];
  double weight_decay[kMaxTensors];
  int64_t offsets[kMaxTensors + 1];  // offsets[t] = elements before tensor t
  int count;
};

// Element i of the batch: its tensor t and its index j in that tensor.
__device__ __forceinline__ void locate(const Batch& batch, int64_t i, int& t, int64_t& j) {
  t = 0;
  while (batch.offsets[t + 1] <= i) ++t;
  j = i - batch.offsets[t];
}

// One Adam(W) step (core/update_rules.h's AdamRule, the CPU's formula) on every element of the batch's
// tensors, seen as one flat range; a grid-stride loop, a thread per element.
template <typename T>
__global__ void adam_kernel(Batch batch, AdamHyper h, const AdamHyper* device_hyper) {
  if (device_hyper != nullptr) h = *device_hyper;  // a CUDA graph's step: this step's numbers, uploaded before it
  const AdamRule<T> rule(h.lr, h.beta1, h.beta2, h.eps, h.correction1, h.correction2, h.decoupled);
  EMBER_CUDA_LOOP(i, batch.offsets[batch.count]) {
    int t;
    int64_t j;
    locate(batch, i, t, j);
    T* p = static_cast<T*>(batch.params[t]);
    T* m = static_cast<T*>(batch.state1[t]);
    T* v = static_cast<T*>(batch.state2[t]);
    rule(p[j], static_cast<const T*>(batch.grads[t])[j], m[j], v[j], batch.weight_decay[t]);
  }
}

// One SGD step, with momentum where state1 is set (SgdRule, the CPU's formula), on every element of the
// batch's tensors seen as one flat range; a grid-stride loop, a thread per element.
template <typename T>
__global__ void sgd_kernel(Batch batch, SgdHyper h) {
  const SgdRule<T> rule{T(h.lr), T(h.momentum), h.first_step};
  EMBER_CUDA_LOOP(i, batch.offsets[batch.count]) {
    int t;
    int64_t j;
    locate(batch, i, t, j);
    T* p = static_cast<T*>(batch.params[t]);
    T* velocity = batch.state1[t] != nullptr ? static_cast<T*>(batch.state1[t]) + j : nullptr;
    rule(p[j], static_cast<const T*>(batch.grads[t])[j], velocity, batch.weight_decay[t]);
  }
}

// Clipping's norm: block c sums the squares (in double) of one kNormChunk-long chunk of one tensor
// (grads[t]) and writes partials[c]; the block combines its threads' sums by a fixed tree, so the
// result is the same on every run. chunk_first[t] = the chunks of the tensors before t.
constexpr int64_t kNormChunk = 1 << 16;

struct ChunkStarts {
  int64_t first[kMaxTensors + 1];
};

int64_t chunks_of(int64_t n) { return (n + kNormChunk - 1) / kNormChunk; }

// partials[c] = the sum of squares of chunk c (see above): one block per chunk, a fixed tree in shared memory.
template <typename T>
__global__ void sum_squares_kernel(Batch batch, ChunkStarts chunks, double* partials) {
  __shared__ double sums[kThreads];
  const int64_t c = blockIdx.x;
  int t = 0;
  while (chunks.first[t + 1] <= c) ++t;
  const T* x = static_cast<const T*>(batch.grads[t]);
  const int64_t n = batch.offsets[t + 1] - batch.offsets[t];
  const int64_t begin = (c - chunks.first[t]) * kNormChunk;
  const int64_t end = begin + kNormChunk < n ? begin + kNormChunk : n;
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) s += double(x[i]) * double(x[i]);
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[c] = sums[0];
}

// Clipping's scaling: params[t][j] *= value, every tensor (like Tensor::mul_, in the tensor's type); the
// batch's tensors as one flat range, a grid-stride loop, a thread per element.
template <typename T>
__global__ void scale_all_kernel(Batch batch, T value) {
  EMBER_CUDA_LOOP(i, batch.offsets[batch.count]) {
    int t;
    int64_t j;
    locate(batch, i, t, j);
    static_cast<T*>(batch.params[t])[j] *= value;
  }
}

// Clipping's factor, on the GPU (one thread): the partials added up in order, like the host did.
__global__ void clip_scale_kernel(const double* partials, int64_t count, double max_norm, double* norm_scale) {
  double total = 0;
  for (int64_t c = 0; c < count; ++c) total += partials[c];
  const double norm = std::sqrt(total);
  norm_scale[0] = norm;
  norm_scale[1] = norm > max_norm && norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
}

// params[t][j] *= *factor (read on the GPU), in the tensor's type and parallelised like scale_all_kernel.
template <typename T>
__global__ void scale_all_by_kernel(Batch batch, const double* factor) {
  const T value = T(*factor);
  EMBER_CUDA_LOOP(i, batch.offsets[batch.count]) {
    int t;
    int64_t j;
    locate(batch, i, t, j);
    static_cast<T*>(batch.params[t])[j] *= value;
  }
}

// Calls launch(batch, total) for each group of up to kMaxTensors tensors that has elements.
template <typename Launch>
void for_each_batch(const TensorList& list, Launch launch) {
  for (int first = 0; first < list.count; first += kMaxTensors) {
    Batch batch{};
    batch.count = list.count - first < kMaxTensors ? list.count - first : kMaxTensors;
    batch.offsets[0] = 0;
    for (int t = 0; t < batch.count; ++t) {
      batch.params[t] = list.params != nullptr ? list.params[first + t] : nullptr;
      batch.grads[t] = list.grads != nullptr ? list.grads[first + t] : nullptr;
      batch.state1[t] = list.state1 != nullptr ? list.state1[first + t] : nullptr;
      batch.state2[t] = list.state2 != nullptr ? list.state2[first + t] : nullptr;
      batch.weight_decay[t] = list.weight_decays != nullptr ? list.weight_decays[first + t] : 0.0;
      batch.offsets[t + 1] = batch.offsets[t] + list.sizes[first + t];
    }
    const int64_t total = batch.offsets[batch.count];
    if (total > 0) launch(batch, total);
  }
}

}  // namespace

void adam_step(const On& on, const TensorList& tensors, const AdamHyper& hyper, const AdamHyper* device_hyper) {
  cudaStream_t stream = use_device(on.device);
  for_each_batch(tensors, [&](const Batch& batch, int64_t total) {
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      adam_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(batch, hyper, device_hyper);
    });
    EMBER_CUDA_LAUNCHED("adam_kernel");
  });
}

void sgd_step(const On& on, const TensorList& tensors, const SgdHyper& hyper) {
  cudaStream_t stream = use_device(on.device);
  for_each_batch(tensors, [&](const Batch& batch, int64_t total) {
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      sgd_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(batch, hyper);
    });
    EMBER_CUDA_LAUNCHED("sgd_kernel");
  });
}

int64_t sum_squares_partials(const On&, const TensorList& tensors) {
  int64_t chunks = 0;
  for (int t = 0; t < tensors.count; ++t) chunks += chunks_of(tensors.sizes[t]);
  return chunks;
}

void sum_squares(const On& on, const TensorList& tensors, double* partials) {
  cudaStream_t stream = use_device(on.device);
  for_each_batch(tensors, [&](const Batch& batch, int64_t) {
    ChunkStarts chunks{};
    for (int t = 0; t < batch.count; ++t)
      chunks.first[t + 1] = chunks.first[t] + chunks_of(batch.offsets[t + 1] - batch.offsets[t]);
    const int64_t blocks = chunks.first[batch.count];
    if (blocks > 2147483647) raise_message("clip_grad_norm (CUDA): too many elements");
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      sum_squares_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(batch, chunks, partials);
    });
    EMBER_CUDA_LAUNCHED("sum_squares_kernel");
    partials += blocks;
  });
}

void scale_all(const On& on, const TensorList& tensors, double value) {
  cudaStream_t stream = use_device(on.device);
  for_each_batch(tensors, [&](const Batch& batch, int64_t total) {
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      scale_all_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(batch, T(value));
    });
    EMBER_CUDA_LAUNCHED("scale_all_kernel");
  });
}

void clip_scale(const On& on, const double* partials, int64_t count, double max_norm, double* norm_scale) {
  cudaStream_t stream = use_device(on.device);
  clip_scale_kernel<<<1, 1, 0, stream>>>(partials, count, max_norm, norm_scale);
  EMBER_CUDA_LAUNCHED("clip_scale_kernel");
}

void scale_all_by(const On& on, const TensorList& tensors, const double* factor) {
  cudaStream_t stream = use_device(on.device);
  for_each_batch(tensors, [&](const Batch& batch, int64_t total) {
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      scale_all_by_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(batch, factor);
    });
    EMBER_CUDA_LAUNCHED("scale_all_by_kernel");
  });
}

}  // namespace ember::cuda
