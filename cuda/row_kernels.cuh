// What the row kernels share (cuda/reduce_kernels.cu, softmax_kernels.cu, norm_kernels.cu,
// cross_entropy_kernels.cu): each works on the rows of a contiguous [rows, n] block, the last dim of its op.
// Long rows: one block of 256 threads per row: each thread accumulates a fixed, strided subset of
// the row, and the 256 partial results are combined by a tree in shared memory in a fixed order
// (block_reduce); floating sums accumulate in double. Short rows of softmax, the normalisations and
// cross-entropy (up to 1024 elements: the recipe's 128 and 256, its 2 classes): one warp per row, several
// rows per block, warp shuffles (below). No atomics: the same input always gives the same bits, whatever
// the GPU.
// NOTE: block_reduce declares a __shared__ array in this header: the emulator build translates the headers
// of cuda/ as it translates the .cu files (tests/cuda_emulator/translate.py, CMakeLists.txt).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "cuda/launch.h"

namespace ember::cuda::row_kernels {

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

inline unsigned warp_row_blocks(int64_t rows) {
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
inline unsigned grid_rows(int64_t rows) {
  if (rows > 2147483647) raise_message("CUDA row kernel: more than 2^31 - 1 rows");
  return unsigned(rows);
}

// Copies [outer, n, inner] (contiguous) to [outer, inner, n] (contiguous: rows of n) when `to_rows`, else
// back: one copy kernel, as a transposed tensor's contiguous() is.
inline void move_rows(const On& on, const void* src, void* dst, int64_t outer, int64_t n, int64_t inner, bool to_rows) {
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

// The kinds of reduce_rows (core/kernels.h's ReduceKind).
constexpr int kSum = int(ReduceKind::Sum), kMax = int(ReduceKind::Max);

// out[r] = the sum or max (kind: kSum, kMax) of in[r, 0..n), in contiguous [rows, n] of `dtype`
// (cuda/reduce_kernels.cu; cross-entropy's mean is one).
void reduce_rows(int device, int dtype, int kind, const void* in, void* out, int64_t rows, int64_t n);

}  // namespace ember::cuda::row_kernels
