// Cross-entropy of rows of logits against integer targets (ignore_index skipped), forward and backward:
// each row's max, its sum of exponentials and its loss by a block (sum in double) or, for up to 1024
// classes (the classifier's 2), a warp (cuda/row_kernels.cuh); the mean over the counted rows in double
// (reduce_rows: one block, a fixed order), rounded once to the logits' dtype.
#include <cmath>
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"
#include "cuda/row_kernels.cuh"

namespace ember::cuda {

using namespace row_kernels;  // the shared helpers: cuda/row_kernels.cuh

// ---- Cross-entropy.
namespace {

// For row r (target not ignored): the row's max, its sum of exp(x - max) and the loss
// log(sum) - (x[target] - max): one block per row, the sum in double by block_reduce.
template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int64_t* targets, int64_t C, int64_t ignore_index,
                                             T* row_max_out, T* sum_exp_out, double* row_loss) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * C;
  const int64_t t = targets[r];
  if (t == ignore_index) {
    if (threadIdx.x == 0) row_max_out[r] = T(0), sum_exp_out[r] = T(1), row_loss[r] = 0.0;
    return;  // the whole block returns: no thread reaches a barrier
  }
  const T m = row_max(row, C);
  double s = 0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) s += double(std::exp(row[j] - m));
  s = block_reduce(s, SumOp{});
  if (threadIdx.x == 0) {
    row_max_out[r] = m;
    sum_exp_out[r] = T(s);
    row_loss[r] = std::log(double(T(s))) - (double(row[t]) - double(m));
  }
}

// dlogits = (softmax(logits) - onehot(target)) * grad / count (0 on ignored rows), from the forward's
// max and sum: a grid-stride loop, a thread per element.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets, const T* row_max,
                                              const T* sum_exp, T* dlogits, int64_t N, int64_t C,
                                              int64_t ignore_index, const double* grad, int64_t count) {
  const double scale = count > 0 ? grad[0] / double(count) : 0.0;  // the CPU's g.item() / count
  EMBER_CUDA_LOOP(i, N * C) {
    const int64_t r = i / C, c = i % C;
    const int64_t t = targets[r];
    if (t == ignore_index) {
      dlogits[i] = T(0);
    } else {
      T p = std::exp(logits[i] - row_max[r]) / sum_exp[r];
      dlogits[i] = T((double(p) - (c == t ? 1.0 : 0.0)) * scale);
    }
  }
}

// Cross-entropy of rows of C <= kWarpRowMax classes: one warp per row (the block kernel's
// results, with the sum of exponentials accumulated in T: float for float32).
template <typename T>
__global__ void cross_entropy_forward_warp_kernel(const T* logits, const int64_t* targets, int64_t N, int64_t C,
                                                  int64_t ignore_index, T* row_max_out, T* sum_exp_out,
                                                  double* row_loss) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, N) {
    const T* row = logits + r * C;
    const int64_t t = targets[r];  // the same for every lane: the warp branches as one
    if (t == ignore_index) {
      if (lane == 0) row_max_out[r] = T(0), sum_exp_out[r] = T(1), row_loss[r] = 0.0;
      continue;
    }
    T m, s;
    warp_max_and_sum_exp(row, C, lane, m, s);
    if (lane == 0) {
      row_max_out[r] = m;
      sum_exp_out[r] = s;
      row_loss[r] = std::log(double(s)) - (double(row[t]) - double(m));
    }
  }
}

// dlogits of cross-entropy, one warp per row of C <= kWarpRowMax (no index division per element).
template <typename T>
__global__ void cross_entropy_backward_warp_kernel(const T* logits, const int64_t* targets, const T* row_max,
                                                   const T* sum_exp, T* dlogits, int64_t N, int64_t C,
                                                   int64_t ignore_index, const double* grad, int64_t count) {
  const int lane = int(threadIdx.x) % kWarp;
  const double scale = count > 0 ? grad[0] / double(count) : 0.0;  // the CPU's g.item() / count
  EMBER_WARP_ROWS(r, N) {
    const int64_t t = targets[r], base = r * C;
    if (t == ignore_index) {
      for (int64_t j = lane; j < C; j += kWarp) dlogits[base + j] = T(0);
      continue;
    }
    const T m = row_max[r], inv = T(1) / sum_exp[r];
    for (int64_t j = lane; j < C; j += kWarp) {
      const T p = std::exp(logits[base + j] - m) * inv;
      dlogits[base + j] = T((double(p) - (j == t ? 1.0 : 0.0)) * scale);
    }
  }
}

}  // namespace

namespace {

void cross_entropy_rows(const On& on, const void* logits, const int64_t* targets, int64_t N, int64_t C,
                        int64_t ignore_index, void* row_max, void* sum_exp, double* row_loss) {
  if (N == 0) return;
  cudaStream_t stream = use_device(on.device);
  const bool float64 = on.float64();
  if (C <= kWarpRowMax) {  // short rows (the classifier's 2 classes): a warp each
    dispatch_floating(float64, [&](auto tag) {
      using T = decltype(tag);
      cross_entropy_forward_warp_kernel<<<warp_row_blocks(N), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), targets, N, C, ignore_index, static_cast<T*>(row_max),
          static_cast<T*>(sum_exp), row_loss);
    });
    EMBER_CUDA_LAUNCHED("cross_entropy_forward_warp_kernel");
    return;
  }
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_kernel<<<grid_rows(N), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), targets, C, ignore_index, static_cast<T*>(row_max),
        static_cast<T*>(sum_exp), row_loss);
  });
  EMBER_CUDA_LAUNCHED("cross_entropy_forward_kernel");
}

// A 0-d operand at p of `dtype`, for the element-wise kernels of core/cuda_ops.h.
Operand scalar_operand(void* p, int dtype) {
  Operand o;
  o.data = p, o.dtype = dtype;
  return o;
}

}  // namespace

// The rows' losses [N], then their total (one double).
int64_t cross_entropy_scratch(const On&, int64_t N) { return N + 1; }

void cross_entropy_forward(const On& on, const void* logits, const int64_t* targets, int64_t N, int64_t C,
                           int64_t ignore_index, int64_t count, void* row_max, void* sum_exp, void* loss,
                           double* scratch) {
  double* row_loss = scratch;
  double* total = scratch + N;
  cross_entropy_rows(on, logits, targets, N, C, ignore_index, row_max, sum_exp, row_loss);
  // The mean in double (one block, fixed order), then rounded once to the logits' dtype.
  const Shape8 scalar;  // 0-d
  const Operand total_op = scalar_operand(total, kFloat64);
  if (N > 0) reduce_rows(on.device, kFloat64, kSum, row_loss, total, 1, N);
  else fill(on.device, scalar, total_op, 0.0);
  if (count > 0) scale(on.device, scalar, total_op, 1.0 / double(count));
  else fill(on.device, scalar, total_op, 0.0);
  copy(on.device, scalar, scalar_operand(loss, on.dtype), total_op);
}

void cross_entropy_backward(const On& on, const void* logits, const int64_t* targets, const void* row_max,
                            const void* sum_exp, void* dlogits, int64_t N, int64_t C, int64_t ignore_index,
                            const double* grad, int64_t count) {
  if (N * C == 0) return;
  cudaStream_t stream = use_device(on.device);
  const bool float64 = on.float64();
  if (C <= kWarpRowMax) {
    dispatch_floating(float64, [&](auto tag) {
      using T = decltype(tag);
      cross_entropy_backward_warp_kernel<<<warp_row_blocks(N), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), targets, static_cast<const T*>(row_max),
          static_cast<const T*>(sum_exp), static_cast<T*>(dlogits), N, C, ignore_index, grad, count);
    });
    EMBER_CUDA_LAUNCHED("cross_entropy_backward_warp_kernel");
    return;
  }
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<<<blocks_for(N * C), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), targets, static_cast<const T*>(row_max),
        static_cast<const T*>(sum_exp), static_cast<T*>(dlogits), N, C, ignore_index, grad, count);
  });
  EMBER_CUDA_LAUNCHED("cross_entropy_backward_kernel");
}

}  // namespace ember::cuda
