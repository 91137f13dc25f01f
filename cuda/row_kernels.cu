// Row kernels, forward and backward: reductions over the last dim, argmax, softmax and log-softmax,
// the normalisations over the last dim and cross-entropy.
// Long rows: one block of 256 threads per row: each thread accumulates a fixed, strided subset of
// the row, and the 256 partial results are combined by a tree in shared memory in a fixed order;
// floating sums accumulate in double. Short rows of softmax, the normalisations and cross-entropy
// (up to 1024 elements: the recipe's 128 and 256, its 2 classes): one warp per row, several rows per
// block, warp shuffles (below). No
// atomics: the same input always gives the same bits, whatever the GPU.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <cmath>
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/cudnn_softmax.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};

// Combines one value per thread of the block (blockDim.x == kThreads, a power of two) in a fixed
// tree order; every thread gets the result.
template <typename Acc, typename Op>
__device__ Acc block_reduce(Acc value, Op op) {
  __shared__ Acc shared[kThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  Acc result = shared[0];
  __syncthreads();  // the array may be reused by the next call
  return result;
}

template <typename T> struct Accum { using type = double; };
template <> struct Accum<int32_t> { using type = int64_t; };
template <> struct Accum<int64_t> { using type = int64_t; };

template <typename T>
__device__ T row_max(const T* row, int64_t n) {
  T m = T(-INFINITY);
  for (int64_t j = threadIdx.x; j < n; j += kThreads) m = row[j] > m ? row[j] : m;
  return block_reduce(m, MaxOp{});
}

// ---- Short rows: one warp per row, several rows per block, sums by warp shuffles (no shared
// memory, no __syncthreads). A row of up to kWarpRowMax elements goes to one warp of 32 lanes;
// lane l takes elements l, l + 32, ...; a butterfly of __shfl_xor_sync gives every lane the same
// total in the same order (addition is commutative, so lanes i and i ^ k compute the same bits):
// deterministic. The grid is at most kMaxRowBlocks blocks of kRowsPerBlock warps; each warp then
// takes rows kRowsPerBlock * gridDim.x apart. float32 rows accumulate in float (their sums are of
// at most 1024 terms; double where the row is float64).
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;  // 8 warps of a 256-thread block
constexpr int64_t kWarpRowMax = 1024;
constexpr int64_t kMaxRowBlocks = 512;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

unsigned warp_row_blocks(int64_t rows) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return unsigned(blocks < kMaxRowBlocks ? blocks : kMaxRowBlocks);
}

// Row r of warp (threadIdx.x / 32) of this block, then every kRowsPerBlock * gridDim.x rows.
#define EMBER_WARP_ROWS(r, rows)                                                                    \
  for (int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < (rows);          \
       r += int64_t(gridDim.x) * kRowsPerBlock)

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    A other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}
// A row's max m and sum of exp(x - m), its lanes striding over the row; every lane gets both.
template <typename T>
__device__ __forceinline__ void warp_max_and_sum_exp(const T* row, int64_t n, int lane, T& m, T& s) {
  m = T(-INFINITY);
  for (int64_t j = lane; j < n; j += kWarp) m = row[j] > m ? row[j] : m;
  m = warp_max(m);
  s = 0;
  for (int64_t j = lane; j < n; j += kWarp) s += std::exp(row[j] - m);
  s = warp_sum(s);
}

// Rows go to blocks; grids are limited to 2^31 - 1 blocks in x, far above any row count here.
unsigned grid_rows(int64_t rows) {
  if (rows > 2147483647) raise_message("CUDA row kernel: more than 2^31 - 1 rows");
  return unsigned(rows);
}

// Copies [outer, n, inner] (contiguous) to [outer, inner, n] (contiguous: rows of n) when `to_rows`, else
// back: one copy kernel, as a transposed tensor's contiguous() is.
void move_rows(const On& on, const void* src, void* dst, int64_t outer, int64_t n, int64_t inner, bool to_rows) {
  Shape8 shape;
  shape.ndim = 3;
  shape.size[0] = outer, shape.size[1] = n, shape.size[2] = inner;
  const int64_t spread[3] = {n * inner, inner, 1}, as_rows[3] = {inner * n, 1, n};
  Operand from, to;
  from.data = const_cast<void*>(src), from.dtype = on.dtype;
  to.data = dst, to.dtype = on.dtype;
  for (int d = 0; d < 3; ++d) {
    from.stride[d] = to_rows ? spread[d] : as_rows[d];
    to.stride[d] = to_rows ? as_rows[d] : spread[d];
  }
  copy(on.device, shape, to, from);
}

// Bytes per element of on.dtype (float32, float64, int32, int64).
int64_t element_bytes(const On& on) { return on.dtype == kFloat64 || on.dtype == kInt64 ? 8 : 4; }

// ---- Reductions: sum / max and argmax of each row.
constexpr int kSum = int(ReduceKind::Sum), kMax = int(ReduceKind::Max);

// out[r] = sum (accumulated in double, int64 for integers) or max of in[r, :]: one block per row, a
// fixed tree (block_reduce).
template <typename T>
__global__ void reduce_kernel(const T* in, T* out, int64_t n, int kind) {
  using Acc = typename Accum<T>::type;
  const T* row = in + int64_t(blockIdx.x) * n;
  if (kind == kSum) {
    Acc acc = 0;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) acc += Acc(row[j]);
    acc = block_reduce(acc, SumOp{});
    if (threadIdx.x == 0) out[blockIdx.x] = T(acc);
  } else {
    T acc = row[0];
    for (int64_t j = threadIdx.x; j < n; j += kThreads) acc = row[j] > acc ? row[j] : acc;
    acc = block_reduce(acc, MaxOp{});
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
  }
}

// out[r] = the index of the largest in[r, :], the first on ties: one block per row, each thread's best
// of its strided subset, then a fixed tree in shared memory.
template <typename T>
__global__ void argmax_kernel(const T* in, int64_t* out, int64_t n) {
  __shared__ T best_value[kThreads];
  __shared__ int64_t best_index[kThreads];
  const T* row = in + int64_t(blockIdx.x) * n;
  T best = row[0];
  int64_t index = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    if (row[j] > best) best = row[j], index = j;
  best_value[threadIdx.x] = best;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    int t = threadIdx.x;
    if (t < stride) {
      T v = best_value[t + stride];
      int64_t i = best_index[t + stride];
      if (v > best_value[t] || (v == best_value[t] && i < best_index[t])) best_value[t] = v, best_index[t] = i;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_index[0];
}

// out[r] = sum or max of in[r, :], rows of n <= kWarpRowMax: reduce_kernel's sums (in double, or
// int64 for integers) and maxima, a warp per row. Before it, a short row took a whole block and ten
// __syncthreads: the recipe's position-embedding gradient (the sum over the batch of 32) was 32,768
// blocks of 256 threads, 32 of them with an element each.
template <typename T>
__global__ void reduce_warp_kernel(const T* in, T* out, int64_t rows, int64_t n, int kind) {
  using Acc = typename Accum<T>::type;
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const T* row = in + r * n;
    if (kind == kSum) {
      Acc acc = 0;
      for (int64_t j = lane; j < n; j += kWarp) acc += Acc(row[j]);
      acc = warp_sum(acc);
      if (lane == 0) out[r] = T(acc);
    } else {
      T acc = row[0];
      for (int64_t j = lane; j < n; j += kWarp) acc = row[j] > acc ? row[j] : acc;
      acc = warp_max(acc);
      if (lane == 0) out[r] = acc;
    }
  }
}

// out[r] = the sum or max (kind: kSum, kMax) of in[r, 0..n), in contiguous [rows, n] of `dtype`.
void reduce_rows(int device, int dtype, int kind, const void* in, void* out, int64_t rows, int64_t n) {
  if (rows == 0) return;
  if (n == 0 && kind == kMax) raise_message("max: cannot reduce an empty dim");
  cudaStream_t stream = use_device(device);
  if (n > 0 && n <= kWarpRowMax) {  // short rows: a warp each
    const unsigned blocks = warp_row_blocks(rows);
    dispatch<float, double, int32_t, int64_t>(dtype, "sum / max: unsupported dtype on CUDA", [&](auto tag) {
      using T = decltype(tag);
      reduce_warp_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), rows, n,
                                                          kind);
    });
    EMBER_CUDA_LAUNCHED("reduce_warp_kernel");
    return;
  }
  unsigned grid = grid_rows(rows);
  dispatch<float, double, int32_t, int64_t>(dtype, "sum / max: unsupported dtype on CUDA", [&](auto tag) {
    using T = decltype(tag);
    reduce_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), n, kind);
  });
  EMBER_CUDA_LAUNCHED("reduce_kernel");
}

// out[r] = the first index of the largest in[r, :] (int64).
void argmax_rows(int device, int dtype, const void* in, int64_t* out, int64_t rows, int64_t n) {
  if (rows == 0) return;
  if (n == 0) raise_message("argmax: cannot reduce an empty dim");
  cudaStream_t stream = use_device(device);
  unsigned grid = grid_rows(rows);
  dispatch<float, double, int32_t, int64_t>(dtype, "argmax: unsupported dtype on CUDA", [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(in), out, n);
  });
  EMBER_CUDA_LAUNCHED("argmax_kernel");
}

}  // namespace

// inner > 1: x moved to rows [outer, inner, R].
int64_t reduce_scratch(const On&, int64_t outer, int64_t R, int64_t inner) { return inner > 1 ? outer * R * inner : 0; }

void reduce(const On& on, ReduceKind kind, const void* x, void* out, int64_t outer, int64_t R, int64_t inner,
            void* scratch) {
  if (outer * inner == 0) return;
  if (R == 0) {  // a sum (the op refuses the max over an empty dim)
    Shape8 shape;
    shape.ndim = 1;
    shape.size[0] = outer * inner;
    Operand o;
    o.data = out, o.dtype = on.dtype, o.stride[0] = 1;
    return fill(on.device, shape, o, 0.0);
  }
  if (inner > 1) {
    move_rows(on, x, scratch, outer, R, inner, true);
    x = scratch;
  }
  reduce_rows(on.device, on.dtype, int(kind), x, out, outer * inner, R);
}

void argmax(const On& on, const void* x, int64_t* out, int64_t outer, int64_t n, int64_t inner, void* scratch) {
  if (outer * inner == 0) return;
  if (inner > 1) {
    move_rows(on, x, scratch, outer, n, inner, true);
    x = scratch;
  }
  argmax_rows(on.device, on.dtype, x, out, outer * inner, n);
}

// ---- Softmax and log-softmax.
namespace {

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

// ---- Layer norm: forward, dx, then dweight and dbias by chunks of rows.
namespace {

// Layer norm of rows of D <= kWarpRowMax: the mean, then the mean square deviation (two passes),
// both of the row shifted by its first element, like the CPU.
// NOTE: the shift is what lets float32 accumulate in float: rows far from zero (x + 1e4) lost three
// digits without it (measured by "layer_norm: float32 stays accurate far from zero"); x - x0 is
// exact for nearby floats.
template <typename T>
__global__ void layer_norm_forward_warp_kernel(const T* x, const T* w, const T* b, T* y, double* mean_out,
                                               double* rstd_out, int64_t rows, int64_t D, double eps) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    const T shift = x[base];
    T s = 0;
    for (int64_t j = lane; j < D; j += kWarp) s += x[base + j] - shift;
    const T mean = warp_sum(s) / T(D);  // of the shifted row
    T q = 0;
    for (int64_t j = lane; j < D; j += kWarp) {
      T d = (x[base + j] - shift) - mean;
      q += d * d;
    }
    const T rstd = T(1) / std::sqrt(warp_sum(q) / T(D) + T(eps));
    for (int64_t j = lane; j < D; j += kWarp) {
      T v = ((x[base + j] - shift) - mean) * rstd;
      if (w != nullptr) v *= w[j];
      if (b != nullptr) v += b[j];
      y[base + j] = v;
    }
    if (lane == 0) {
      mean_out[r] = double(shift) + double(mean);
      rstd_out[r] = double(rstd);
    }
  }
}

// dx of layer norm, rows of D <= kWarpRowMax (layer_norm_dx_kernel's formula).
template <typename T>
__global__ void layer_norm_dx_warp_kernel(const T* grad, const T* x, const double* mean, const double* rstd,
                                          const T* w, T* dx, int64_t rows, int64_t D) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    const double mu = mean[r];  // NOTE: x - mu in double: mu of a row far from zero is not a float
    const T rs = T(rstd[r]);
    T s_gw = 0, s_gwx = 0;
    for (int64_t j = lane; j < D; j += kWarp) {
      T gw = grad[base + j] * (w != nullptr ? w[j] : T(1));
      s_gw += gw;
      s_gwx += gw * (T(double(x[base + j]) - mu) * rs);
    }
    const T mean_gw = warp_sum(s_gw) / T(D), mean_gwx = warp_sum(s_gwx) / T(D);
    for (int64_t j = lane; j < D; j += kWarp) {
      T gw = grad[base + j] * (w != nullptr ? w[j] : T(1));
      T xhat = T(double(x[base + j]) - mu) * rs;
      dx[base + j] = rs * (gw - mean_gw - xhat * mean_gwx);
    }
  }
}

// y[r, :] = (x - mean) * rstd * w + b, and the row's mean and rstd for the backward: one block per row,
// the two passes' sums in double by block_reduce.
template <typename T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, T* y, double* mean_out,
                                          double* rstd_out, int64_t D, double eps) {
  const int64_t base = int64_t(blockIdx.x) * D;
  double s = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) s += double(x[base + j]);
  const double mean = block_reduce(s, SumOp{}) / double(D);
  double q = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double d = double(x[base + j]) - mean;
    q += d * d;
  }
  const double var = block_reduce(q, SumOp{}) / double(D);
  const double rstd = 1.0 / std::sqrt(var + eps);
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double v = (double(x[base + j]) - mean) * rstd;
    if (w != nullptr) v *= double(w[j]);
    if (b != nullptr) v += double(b[j]);
    y[base + j] = T(v);
  }
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// dx[r, :] = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = grad * w: one block per row, the two
// means in double by block_reduce.
template <typename T>
__global__ void layer_norm_dx_kernel(const T* grad, const T* x, const double* mean, const double* rstd, const T* w,
                                     T* dx, int64_t D) {
  const int64_t base = int64_t(blockIdx.x) * D;
  const double mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
  double s_gw = 0, s_gwx = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double gw = double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0);
    double xhat = (double(x[base + j]) - mu) * rs;
    s_gw += gw;
    s_gwx += gw * xhat;
  }
  const double mean_gw = block_reduce(s_gw, SumOp{}) / double(D);
  const double mean_gwx = block_reduce(s_gwx, SumOp{}) / double(D);
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    double gw = double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0);
    double xhat = (double(x[base + j]) - mu) * rs;
    dx[base + j] = T(rs * (gw - mean_gw - xhat * mean_gwx));
  }
}

constexpr int64_t kLayerNormChunkRows = 64;

// partial[c, j] = sum over the rows of chunk c (in order) of grad * xhat; partial[chunks + c, j] of grad.
// A thread per (column j, chunk c): blockIdx.y is the chunk.
template <typename T>
__global__ void layer_norm_partial_kernel(const T* grad, const T* x, const double* mean, const double* rstd,
                                          int64_t rows, int64_t D, double* partial, int64_t chunks) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (j >= D) return;
  double pw = 0, pb = 0;
  const int64_t end = (c + 1) * kLayerNormChunkRows < rows ? (c + 1) * kLayerNormChunkRows : rows;
  for (int64_t r = c * kLayerNormChunkRows; r < end; ++r) {
    double g = double(grad[r * D + j]);
    pw += g * (double(x[r * D + j]) - mean[r]) * rstd[r];
    pb += g;
  }
  partial[c * D + j] = pw;
  partial[(chunks + c) * D + j] = pb;
}

// dweight[j] and dbias[j] = the sums over the chunks, in order, of layer_norm_partial_kernel's partials:
// a thread per column j.
template <typename T>
__global__ void layer_norm_combine_kernel(const double* partial, int64_t chunks, int64_t D, T* dweight, T* dbias) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= D) return;
  double w = 0, b = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    w += partial[c * D + j];
    b += partial[(chunks + c) * D + j];
  }
  if (dweight != nullptr) dweight[j] = T(w);
  if (dbias != nullptr) dbias[j] = T(b);
}

}  // namespace

void layer_norm_forward(const On& on, const void* x, const void* weight, const void* bias, void* y, double* mean,
                        double* rstd, int64_t rows, int64_t D, double eps) {
  if (rows == 0) return;
  cudaStream_t stream = use_device(on.device);
  const bool float64 = on.float64();
  if (D <= kWarpRowMax) {  // short rows: a warp each
    dispatch_floating(float64, [&](auto tag) {
      using T = decltype(tag);
      layer_norm_forward_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
          static_cast<T*>(y), mean, rstd, rows, D, eps);
    });
    EMBER_CUDA_LAUNCHED("layer_norm_forward_warp_kernel");
    return;
  }
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<T*>(y), mean, rstd, D, eps);
  });
  EMBER_CUDA_LAUNCHED("layer_norm_forward_kernel");
}

namespace {
int64_t layer_norm_chunks(int64_t rows) { return (rows + kLayerNormChunkRows - 1) / kLayerNormChunkRows; }
}  // namespace

// Two [chunks, D] blocks: dweight's chunk sums, then dbias's.
int64_t layer_norm_scratch(const On&, int64_t rows, int64_t D) { return 2 * layer_norm_chunks(rows) * D; }

template <typename T>
void layer_norm_backward_typed(cudaStream_t stream, const T* grad, const T* x, const double* mean, const double* rstd,
                               const T* w, T* dx, T* dw, T* db, int64_t rows, int64_t D, double* partial) {
  if (dx != nullptr && D <= kWarpRowMax) {  // short rows: a warp each
    layer_norm_dx_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(grad, x, mean, rstd, w, dx, rows, D);
    EMBER_CUDA_LAUNCHED("layer_norm_dx_warp_kernel");
  } else if (dx != nullptr) {
    layer_norm_dx_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(grad, x, mean, rstd, w, dx, D);
    EMBER_CUDA_LAUNCHED("layer_norm_dx_kernel");
  }
  if (dw != nullptr || db != nullptr) {
    const int64_t chunks = layer_norm_chunks(rows);
    if (chunks > 65535) raise_message("layer_norm backward: too many rows for the CUDA kernel (over 4 million)");
    dim3 grid(unsigned((D + kThreads - 1) / kThreads), unsigned(chunks));
    layer_norm_partial_kernel<<<grid, kThreads, 0, stream>>>(grad, x, mean, rstd, rows, D, partial, chunks);
    EMBER_CUDA_LAUNCHED("layer_norm_partial_kernel");
    layer_norm_combine_kernel<<<unsigned((D + kThreads - 1) / kThreads), kThreads, 0, stream>>>(partial, chunks, D, dw, db);
    EMBER_CUDA_LAUNCHED("layer_norm_combine_kernel");
  }
}

void layer_norm_backward(const On& on, const void* grad, const void* x, const double* mean, const double* rstd,
                         const void* weight, void* dx, void* dweight, void* dbias, int64_t rows, int64_t D,
                         double* partial) {
  if (rows == 0 || D == 0) return;
  cudaStream_t stream = use_device(on.device);
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    layer_norm_backward_typed(stream, static_cast<const T*>(grad), static_cast<const T*>(x), mean, rstd,
                              static_cast<const T*>(weight), static_cast<T*>(dx), static_cast<T*>(dweight),
                              static_cast<T*>(dbias), rows, D, partial);
  });
}

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

// ---- RMS norm (autograd/ops/layer_norm.cpp; the op added in docs/adding-an-op.md): one warp per
// short row, else one block per row like layer norm with sums in double; dweight by chunks of kRmsNormChunkRows rows (core/kernels.h), then the chunks in
// order (the CPU's order too).
namespace {

// y[r, :] = x[r, :] * rstd[r] * w, rstd[r] = 1 / sqrt(mean(x[r, :]^2) + eps): one block per row, the sum of
// squares in double by block_reduce.
template <typename T>
__global__ void rms_norm_forward_kernel(const T* x, const T* w, T* y, double* rstd_out, int64_t D, double eps) {
  const int64_t base = int64_t(blockIdx.x) * D;
  double q = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) q += double(x[base + j]) * double(x[base + j]);
  const double rstd = 1.0 / std::sqrt(block_reduce(q, SumOp{}) / double(D) + eps);
  for (int64_t j = threadIdx.x; j < D; j += kThreads)
    y[base + j] = T(double(x[base + j]) * rstd * (w != nullptr ? double(w[j]) : 1.0));
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
}

// dx[r, :] = rstd * (gw - xhat * mean(gw * xhat)), gw = grad * w, xhat = x * rstd: one block per row, the
// mean in double by block_reduce.
template <typename T>
__global__ void rms_norm_dx_kernel(const T* grad, const T* x, const double* rstd, const T* w, T* dx, int64_t D) {
  const int64_t base = int64_t(blockIdx.x) * D;
  const double rs = rstd[blockIdx.x];
  double s = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads)
    s += double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0) * double(x[base + j]) * rs;
  const double mean_gwx = block_reduce(s, SumOp{}) / double(D);
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    const double gw = double(grad[base + j]) * (w != nullptr ? double(w[j]) : 1.0);
    dx[base + j] = T(rs * (gw - double(x[base + j]) * rs * mean_gwx));
  }
}

// partial[c, j] = sum over the rows of chunk c (in order) of grad * xhat; dweight[j] = sum over c in order.
// A thread per (column j, chunk c): blockIdx.y is the chunk.
template <typename T>
__global__ void rms_norm_partial_kernel(const T* grad, const T* x, const double* rstd, int64_t rows, int64_t D,
                                        double* partial) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x, c = blockIdx.y;
  if (j >= D) return;
  double p = 0;
  const int64_t end = (c + 1) * kRmsNormChunkRows < rows ? (c + 1) * kRmsNormChunkRows : rows;
  for (int64_t r = c * kRmsNormChunkRows; r < end; ++r) p += double(grad[r * D + j]) * double(x[r * D + j]) * rstd[r];
  partial[c * D + j] = p;
}

// dweight[j] = the sum over the chunks, in order, of rms_norm_partial_kernel's partials: a thread per
// column j.
template <typename T>
__global__ void rms_norm_combine_kernel(const double* partial, int64_t chunks, int64_t D, T* dweight) {
  const int64_t j = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= D) return;
  double sum = 0;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * D + j];
  dweight[j] = T(sum);
}

// The same for rows of D <= kWarpRowMax: one warp per row, sums in T (float for float32).
// NOTE: the squares are of x / max|x| (the row's largest magnitude, then mean(x^2) rebuilt in
// double): a float32 square overflows above 1.8e19 and underflows below 1e-23, where the CPU (in
// double) still normalises to 1 ("rms_norm's CUDA kernels match the CPU" checks 1e20 and 1e-30).
template <typename T>
__global__ void rms_norm_forward_warp_kernel(const T* x, const T* w, T* y, double* rstd_out, int64_t rows, int64_t D,
                                             double eps) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    T a = 0;
    for (int64_t j = lane; j < D; j += kWarp) a = std::abs(x[base + j]) > a ? std::abs(x[base + j]) : a;
    a = warp_max(a);
    T q = 0;
    if (a > T(0))
      for (int64_t j = lane; j < D; j += kWarp) {
        const T v = x[base + j] / a;
        q += v * v;
      }
    q = warp_sum(q);
    const double rstd = 1.0 / std::sqrt(double(a) * double(a) * (double(q) / double(D)) + eps);
    for (int64_t j = lane; j < D; j += kWarp)
      y[base + j] = T(double(x[base + j]) * rstd * (w != nullptr ? double(w[j]) : 1.0));
    if (lane == 0) rstd_out[r] = rstd;
  }
}

// dx of RMS norm (rms_norm_dx_kernel's formula), rows of D <= kWarpRowMax: one warp per row, sums by
// warp shuffles.
template <typename T>
__global__ void rms_norm_dx_warp_kernel(const T* grad, const T* x, const double* rstd, const T* w, T* dx,
                                        int64_t rows, int64_t D) {
  const int lane = int(threadIdx.x) % kWarp;
  EMBER_WARP_ROWS(r, rows) {
    const int64_t base = r * D;
    const T rs = T(rstd[r]);
    T s = 0;
    for (int64_t j = lane; j < D; j += kWarp) s += grad[base + j] * (w != nullptr ? w[j] : T(1)) * (x[base + j] * rs);
    const T mean_gwx = warp_sum(s) / T(D);
    for (int64_t j = lane; j < D; j += kWarp) {
      const T gw = grad[base + j] * (w != nullptr ? w[j] : T(1));
      dx[base + j] = rs * (gw - (x[base + j] * rs) * mean_gwx);
    }
  }
}

template <typename T>
void rms_norm_backward_typed(cudaStream_t stream, const T* grad, const T* x, const double* rstd, const T* w, T* dx,
                             T* dw, int64_t rows, int64_t D, double* partial) {
  if (dx != nullptr && D <= kWarpRowMax) {
    rms_norm_dx_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(grad, x, rstd, w, dx, rows, D);
    EMBER_CUDA_LAUNCHED("rms_norm_dx_warp_kernel");
  } else if (dx != nullptr) {
    rms_norm_dx_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(grad, x, rstd, w, dx, D);
    EMBER_CUDA_LAUNCHED("rms_norm_dx_kernel");
  }
  if (dw != nullptr) {
    const int64_t chunks = (rows + kRmsNormChunkRows - 1) / kRmsNormChunkRows;
    if (chunks > 65535) raise_message("rms_norm backward: too many rows for the CUDA kernel (over 4 million)");
    const unsigned columns = unsigned((D + kThreads - 1) / kThreads);
    const dim3 grid(columns, unsigned(chunks));
    rms_norm_partial_kernel<<<grid, kThreads, 0, stream>>>(grad, x, rstd, rows, D, partial);
    EMBER_CUDA_LAUNCHED("rms_norm_partial_kernel");
    rms_norm_combine_kernel<<<columns, kThreads, 0, stream>>>(partial, chunks, D, dw);
    EMBER_CUDA_LAUNCHED("rms_norm_combine_kernel");
  }
}

}  // namespace

void rms_norm_forward(const On& on, const void* x, const void* weight, void* y, double* rstd, int64_t rows, int64_t D,
                      double eps) {
  if (rows == 0) return;
  cudaStream_t stream = use_device(on.device);
  const bool float64 = on.float64();
  if (D <= kWarpRowMax) {  // short rows: a warp each
    dispatch_floating(float64, [&](auto tag) {
      using T = decltype(tag);
      rms_norm_forward_warp_kernel<<<warp_row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), rstd, rows, D, eps);
    });
    EMBER_CUDA_LAUNCHED("rms_norm_forward_warp_kernel");
    return;
  }
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_forward_kernel<<<grid_rows(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), rstd, D, eps);
  });
  EMBER_CUDA_LAUNCHED("rms_norm_forward_kernel");
}

void rms_norm_backward(const On& on, const void* grad, const void* x, const double* rstd, const void* weight,
                       void* dx, void* dweight, int64_t rows, int64_t D, double* partial) {
  if (rows == 0) return;  // dweight stays as the op made it: zeros
  cudaStream_t stream = use_device(on.device);
  dispatch_floating(on.float64(), [&](auto tag) {
    using T = decltype(tag);
    rms_norm_backward_typed(stream, static_cast<const T*>(grad), static_cast<const T*>(x), rstd,
                            static_cast<const T*>(weight), static_cast<T*>(dx), static_cast<T*>(dweight),
                            rows, D, partial);
  });
}

}  // namespace ember::cuda
