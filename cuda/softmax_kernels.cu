// Softmax and log-softmax over a dim, forward and backward: a block per long row (the max and the sum of
// exponentials in double, by block_reduce), a warp per short one (cuda/row_kernels.cuh), or cuDNN's kernels
// when softmax_cudnn() is on (cuda/cudnn_softmax.cu). Another dim than the last is moved to rows and back.
#include <cmath>
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/cudnn_softmax.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"
#include "cuda/row_kernels.cuh"

namespace ember::cuda {

using namespace row_kernels;  // the shared helpers: cuda/row_kernels.cuh

// ---- Softmax and log-softmax.
namespace {

// Bytes per element of on.dtype (float32, float64, int32, int64).
int64_t element_bytes(const On& on) { return on.dtype == kFloat64 || on.dtype == kInt64 ? 8 : 4; }

// y[r, :] = softmax(x[r, :]) (or log-softmax): one block per row; the max and the sum of exp(x - max),
// in double, by block_reduce.
template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, int64_t n, bool log) {
  const T* row = x + int64_t(blockIdx.x) * n;
  T* out = y + int64_t(blockIdx.x) * n;
  const T m = row_max(row, n);
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) s += double(std::exp(row[j] - m));
  s = block_reduce(s, SumOp{});
  if (log) {
    const T log_s = T(std::log(s));
    for (int64_t j = threadIdx.x; j < n; j += kThreads) out[j] = (row[j] - m) - log_s;
  } else {
    const T inv = T(1.0 / s);
    for (int64_t j = threadIdx.x; j < n; j += kThreads) out[j] = std::exp(row[j] - m) * inv;
  }
}

// dx[r, :] from grad and y = softmax (or log-softmax) of the row: one block per row, the row's sum of
// grad * y (or of grad) in double by block_reduce.
template <typename T>
__global__ void softmax_backward_kernel(const T* grad, const T* y, T* dx, int64_t n, bool log) {
  const int64_t base = int64_t(blockIdx.x) * n;
  double acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    acc += log ? double(grad[base + j]) : double(grad[base + j]) * double(y[base + j]);
  const T total = T(block_reduce(acc, SumOp{}));
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    T g = grad[base + j], v = y[base + j];
    dx[base + j] = log ? g - std::exp(v) * total : v * (g - total);
  }
}

// y[r, :] = softmax(x[r, :]) (or log-softmax), rows of n <= kWarpRowMax.
template <typename T>
__global__ void softmax_forward_warp_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const T* row = x + r * n;
    T* out = y + r * n;
    T m, s;
    warp_max_and_sum_exp(row, n, lane, m, s);
    if (log) {
      const T log_s = std::log(s);
      for (int64_t j = lane; j < n; j += kWarp) out[j] = (row[j] - m) - log_s;
    } else {
      const T inv = T(1) / s;
      for (int64_t j = lane; j < n; j += kWarp) out[j] = std::exp(row[j] - m) * inv;
    }
  }
}

// dx[r, :] from grad and y = softmax (or log-softmax) of the row, rows of n <= kWarpRowMax.
template <typename T>
__global__ void softmax_backward_warp_kernel(const T* grad, const T* y, T* dx, int64_t rows, int64_t n, bool log) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * n;
    T acc = 0;
    for (int64_t j = lane; j < n; j += kWarp) acc += log ? grad[base + j] : grad[base + j] * y[base + j];
    const T total = warp_sum(acc);
    for (int64_t j = lane; j < n; j += kWarp) {
      T g = grad[base + j], v = y[base + j];
      dx[base + j] = log ? g - std::exp(v) * total : v * (g - total);
    }
  }
}

// The rows [rows, n] (contiguous) through the own kernels above, or cuDNN's when softmax_cudnn() is on.
void softmax_rows_forward(const On& on, const void* x, void* y, int64_t rows, int64_t n, bool log) {
  if (rows == 0 || n == 0) return;
  if (softmax_cudnn()) return cudnn_softmax_forward(on.device, on.float64(), x, y, rows, n, log);
  cudaStream_t stream = use_device(on.device);
  if (n <= kWarpRowMax) {  // short rows: a warp each
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      softmax_forward_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), rows, n, log);
    });
    EMBER_CUDA_LAUNCHED("softmax_forward_warp_kernel");
    return;
  }
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n,
                                                                     log);
  });
  EMBER_CUDA_LAUNCHED("softmax_forward_kernel");
}

void softmax_rows_backward(const On& on, const void* grad, const void* y, void* dx, int64_t rows, int64_t n,
                           bool log) {
  if (rows == 0 || n == 0) return;
  if (softmax_cudnn()) return cudnn_softmax_backward(on.device, on.float64(), grad, y, dx, rows, n, log);
  cudaStream_t stream = use_device(on.device);
  if (n <= kWarpRowMax) {  // short rows: a warp each
    dispatch_floating(on.float64(), [&](auto tag) {
      using T = decltype(tag);
      softmax_backward_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(y), static_cast<T*>(dx), rows, n, log);
    });
    EMBER_CUDA_LAUNCHED("softmax_backward_warp_kernel");
    return;
  }
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(y), static_cast<T*>(dx), n, log);
  });
  EMBER_CUDA_LAUNCHED("softmax_backward_kernel");
}

}  // namespace

// inner > 1: the operands moved to rows (x; or grad and y) and the rows' result, each outer * n * inner.
int64_t softmax_scratch(const On&, int64_t outer, int64_t n, int64_t inner, bool backward) {
  return inner > 1 ? (backward ? 3 : 2) * outer * n * inner : 0;
}

void softmax_forward(const On& on, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool log,
                     void* scratch) {
  const int64_t numel = outer * n * inner;
  if (numel == 0) return;
  if (inner == 1) return softmax_rows_forward(on, x, y, outer, n, log);
  char* rows_in = static_cast<char*>(scratch);
  char* rows_out = rows_in + numel * element_bytes(on);
  move_rows(on, x, rows_in, outer, n, inner, true);
  softmax_rows_forward(on, rows_in, rows_out, outer * inner, n, log);
  move_rows(on, rows_out, y, outer, n, inner, false);
}

void softmax_backward(const On& on, const void* grad, const void* y, void* dx, int64_t outer, int64_t n,
                      int64_t inner, bool log, void* scratch) {
  const int64_t numel = outer * n * inner;
  if (numel == 0) return;
  if (inner == 1) return softmax_rows_backward(on, grad, y, dx, outer, n, log);
  char* rows_grad = static_cast<char*>(scratch);
  char* rows_y = rows_grad + numel * element_bytes(on);
  char* rows_dx = rows_y + numel * element_bytes(on);
  move_rows(on, grad, rows_grad, outer, n, inner, true);
  move_rows(on, y, rows_y, outer, n, inner, true);
  softmax_rows_backward(on, rows_grad, rows_y, rows_dx, outer * inner, n, log);
  move_rows(on, rows_dx, dx, outer, n, inner, false);
}

}  // namespace ember::cuda
