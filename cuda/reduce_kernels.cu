// Reductions over the last dim, forward only (their backwards are element-wise): the sum or max of each row,
// and argmax. Sums accumulate in double (int64 for integers); a long row takes a block and a fixed tree, a
// short one (up to 1024) a warp and its shuffles (cuda/row_kernels.cuh). Another dim is first moved to
// rows (move_rows).
#include <cmath>
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"
#include "cuda/row_kernels.cuh"

namespace ember::cuda {

using namespace row_kernels;  // the shared helpers: cuda/row_kernels.cuh

namespace {

template <typename T> struct Accum { using type = double; };
template <> struct Accum<int32_t> { using type = int64_t; };
template <> struct Accum<int64_t> { using type = int64_t; };

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

// out[r] = the sum or max (kind: kSum, kMax) of in[r, 0..n), in contiguous [rows, n] of `dtype`.
void row_kernels::reduce_rows(int device, int dtype, int kind, const void* in, void* out, int64_t rows, int64_t n) {
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

}  // namespace ember::cuda
