// What the fused attention kernels share (cuda/attention_simt.cu: the CUDA-core kernels, float32 and
// float64, and mixed precision where tensor cores are not used; cuda/attention_tensor_cores.cu: bfloat16
// WMMA): the launch's arguments, the block's place in the launch, the tiles' loads, the masks, which tiles a
// block can skip, a row's online softmax split over threads, the forward's output, and the host's checks.
// Every function here runs on all threads of a block. Each kernel lays out its own shared memory at its top
// (the tiles differ by family, element type and head size): the layout stays beside the code that reads it.
//
// Layout (core/attention_args.h; the CPU's kernels, core/cpu/attention.cpp, take the same): q [B, H, T, Dh],
// k [B, H, S, Dh], v [B, H, S, Dv], out [B, H, T, Dv], each a strided block read in place (head h of a fused
// [B, T, 3 D] projection is the [T, Dh] block at column h Dh with row stride 3 D: no permute or copy). lse and
// delta are float64 [B, H, T]. The mask: a key padding mask (boolean, the same for every query) is read once
// per key tile into flags; any other (per query, or additive) is read per score.
#pragma once
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include <cuda_bf16.h>

#include "core/attention_args.h"
#include "core/bfloat16.h"
#include "core/online_softmax.h"
#include "cuda/launch.h"

namespace ember::cuda::attention {

// Loops over a thread's registers unrolled, so that each array element is a register, not local memory
// (nvcc; the emulator's g++ has no such pragma and needs none).
#if defined(__CUDACC__)
#define EMBER_UNROLL _Pragma("unroll")
#else
#define EMBER_UNROLL
#endif

constexpr int kBlock = 256;     // threads per block, a 16 x 16 grid (ty = tid / 16, tx = tid % 16)
constexpr int kGrid = 16;       // its side
constexpr int kMaxHeadDim = 128;

using Dims = AttentionDims;

// Everything a kernel reads and writes, passed once per launch (__grid_constant__: read in place).
struct Args {
  Dims d;
  bool general_mask = false;  // a mask read per score (per query, or additive), else none or one per key
  AttentionIn q, k, v, o, dout;  // o: the forward's output, read by the backward
  AttentionOut out, dq, dk, dv;
  AttentionMask mask;
  const double* lse;  // [B, H, T]
  double* lse_out;
  double* delta;      // [B, H, T], the backward's D_i = dO_i . O_i
};

// x, rounded to bfloat16 when `on` (float32; float64 is never rounded).
template <typename T>
__device__ __forceinline__ T bf16_if(bool on, T x) {
  if constexpr (std::is_same<T, float>::value) return on ? __bfloat162float(__float2bfloat16_rn(x)) : x;
  return x;
}

// A value of the operands' type S (float, double, BFloat16) as the compute type T.
template <typename T, typename S>
__device__ __forceinline__ T widen(S x) {
  return T(x);
}

// dst[r][c] (row stride LD) = element (first + r, c) of `src`'s [rows, cols] block (rows `stride` apart), for
// r < ROWS and c < DMAX; zero past row rows - 1 and column cols - 1. Consecutive threads read consecutive
// columns of a row (coalesced). round: each value rounded to bfloat16 (a product's operand in mixed precision).
template <typename T, int DMAX, int ROWS, int LD, typename S>
__device__ __forceinline__ void load_rows(T* dst, const S* src, int64_t stride, int64_t first, int64_t rows,
                                          int64_t cols, bool round = false) {
  for (int idx = threadIdx.x; idx < ROWS * DMAX; idx += kBlock) {
    const int r = idx / DMAX, c = idx % DMAX;
    const int64_t row = first + r;
    dst[r * LD + c] = (row < rows && c < cols) ? bf16_if(round, T(src[row * stride + c])) : T(0);
  }
}

// The same into a bfloat16 tile (exact for a bfloat16 source).
template <int DMAX, int ROWS, int LD, typename S>
__device__ __forceinline__ void load_rows_bf16(__nv_bfloat16* dst, const S* src, int64_t stride, int64_t first,
                                               int64_t rows, int64_t cols) {
  for (int idx = threadIdx.x; idx < ROWS * DMAX; idx += kBlock) {
    const int r = idx / DMAX, c = idx % DMAX;
    const int64_t row = first + r;
    dst[r * LD + c] = __float2bfloat16_rn((row < rows && c < cols) ? float(src[row * stride + c]) : 0.0f);
  }
}

// Whether a key padding mask (per key) hides key j of (b, h); never for no mask or a general one.
__device__ __forceinline__ bool key_hidden(const Args& a, int64_t b, int64_t h, int64_t j) {
  return a.mask.per_key() && a.mask.hides(b, h, 0, j);
}

// flags[c] = 1 where key first + c is masked for every query (padding, or past the last key), else 0.
template <int COLS>
__device__ __forceinline__ void load_key_flags(int* flags, const Args& a, int64_t b, int64_t h, int64_t first) {
  for (int c = threadIdx.x; c < COLS; c += kBlock) {
    const int64_t j = first + c;
    flags[c] = (j >= a.d.S || key_hidden(a, b, h, j)) ? 1 : 0;
  }
}

// Whether keys first .. first + COLS - 1 hold any that a key padding mask does not hide. Every thread reads
// the same bytes (a broadcast), so every thread gets the same answer and a block skips a tile as one.
template <int COLS>
__device__ __forceinline__ bool any_key_live(const Args& a, int64_t b, int64_t h, int64_t first) {
  const int64_t end = first + COLS < a.d.S ? first + COLS : a.d.S;
  if (!a.mask.per_key()) return first < end;
  for (int64_t j = first; j < end; ++j)
    if (!a.mask.hides(b, h, 0, j)) return true;
  return false;
}

// The masked score of query i and key j: scale (q_i . k_j) (given as `scaled`), plus an additive mask, or
// -inf where a mask hides the key: padding (its flag), the future (causal), outside the band, a general
// boolean mask. S: the operands' element type (an additive mask's).
template <typename T, typename S>
__device__ __forceinline__ T masked_score(const Args& a, bool key_flag, int64_t b, int64_t h, int64_t i, int64_t j,
                                          T scaled) {
  const Dims& d = a.d;
  // A tile's rows past the last query and columns past the last key: never read the mask there (out of bounds).
  if (i >= d.T || j >= d.S || attn::key_masked(key_flag, d.causal, i, j) ||
      attn::outside_window(d.window, d.global, i, j))
    return attn::neg_inf<T>();
  if (a.general_mask) {
    if (a.mask.additive()) return scaled + widen<T>(a.mask.template added<S>(b, h, i, j));
    if (a.mask.hides(b, h, i, j)) return attn::neg_inf<T>();
  }
  return scaled;
}

// The probability e^(score - lse) of a masked score (0 where it is -inf: a row that sees nothing has lse -inf).
// NOTE: the backward's P (score of a row past the last query -inf, else masked_score of scale s, then prob_of)
// stays written out in its four kernels: as one function taking scale s, nvcc's float64 dQ kernels came out
// with one fma.rn.f64 fewer (scale s fused with an additive mask in another place), not the same bits.
template <typename T>
__device__ __forceinline__ T prob_of(T score, T lse) {
  return attn::softmax_prob(score == attn::neg_inf<T>(), score, lse);
}

// Whether any query of [q0, q0 + rows) may see any key of [k0, k0 + cols) through the window: a tile
// outside the band (no global row or key, every pair more than `window` apart) is skipped whole.
__device__ __forceinline__ bool tile_in_band(const Dims& d, int64_t q0, int rows, int64_t k0, int cols) {
  if (d.window < 0 || q0 < d.global || k0 < d.global) return true;
  return k0 <= q0 + rows - 1 + d.window && k0 + cols - 1 >= q0 - d.window;
}

// Whether the key tile [k0, k0 + COLS) can give any weight to the query tile [q0, q0 + rows) of (b, h): not
// all padding, not outside the band. Otherwise the tile adds nothing and the block skips it (as one).
template <int COLS>
__device__ __forceinline__ bool key_tile_seen(const Args& a, int64_t b, int64_t h, int64_t q0, int rows, int64_t k0) {
  return any_key_live<COLS>(a, b, h, k0) && tile_in_band(a.d, q0, rows, k0, COLS);
}

// The first key tile past every query row of [q0, q0 + rows) (causal: the later ones are all in the
// future of every row), or all key tiles.
__device__ __forceinline__ int64_t key_tiles_for(const Dims& d, int64_t q0, int rows, int bc) {
  const int64_t n = (d.S + bc - 1) / bc;
  if (!d.causal) return n;
  const int64_t last_row = (q0 + rows < d.T ? q0 + rows : d.T) - 1;
  const int64_t end = last_row / bc + 1;
  return end < n ? end : n;
}

// The block's place in a launch over (b, h, tile): blockIdx.x = (b H + h) tiles + tile, tiles of `size` rows
// (queries, or keys) of `total`; first: the tile's first row.
struct BlockTile {
  int64_t bh, b, h, first;
};
__device__ __forceinline__ BlockTile block_tile(const Dims& d, int64_t total, int size) {
  const int64_t tiles = (total + size - 1) / size;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  return BlockTile{bh, bh / d.H, bh % d.H, tile * size};
}

// Each row's online-softmax state at the start (no key seen): threads 0 .. ROWS - 1, one row each.
template <typename T, int ROWS>
__device__ __forceinline__ void start_rows(T* m_s, T* l_s) {
  if (threadIdx.x < ROWS) {
    const attn::SoftmaxState<T> st = attn::softmax_start<T>();
    m_s[threadIdx.x] = st.m;
    l_s[threadIdx.x] = st.l;
  }
}

// The forward's end: O = acc / l for the thread's RPT rows of the 16 x 16 grid (rows ty + 16 r, columns
// tx + 16 o; 0 for a row with no unmasked key), rounded to S, and each row's lse = m + log l (threads 0 ..
// ROWS - 1). After a barrier: m_s and l_s final.
template <typename T, typename S, int ROWS, int RPT, int OPT>
__device__ __forceinline__ void write_output(const Args& a, int64_t bh, int64_t b, int64_t h, int64_t q0,
                                             const T (&acc)[RPT][OPT], const T* m_s, const T* l_s) {
  const Dims& d = a.d;
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  for (int r = 0; r < RPT; ++r) {
    const int i = ty + kGrid * r;
    if (q0 + i >= d.T) continue;
    const T norm = attn::softmax_norm(attn::SoftmaxState<T>{m_s[i], l_s[i]});
    S* o_row = a.out.at<S>(b, h, q0 + i);
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dv) o_row[tx + kGrid * o] = S(acc[r][o] * norm);
  }
  if (tid < ROWS && q0 + tid < d.T)
    a.lse_out[bh * d.T + q0 + tid] = double(attn::softmax_lse(attn::SoftmaxState<T>{m_s[tid], l_s[tid]}));
}

// The dK/dV kernels' query tile [i0, i0 + ROWS) of (b, h): each row's saved lse and D (0 past the last query).
template <typename T, int ROWS>
__device__ __forceinline__ void load_row_stats(const Args& a, int64_t bh, int64_t i0, T* lse_s, T* d_s) {
  const int tid = threadIdx.x;
  if (tid < ROWS) {
    const int64_t i = i0 + tid;
    lse_s[tid] = i < a.d.T ? T(a.lse[bh * a.d.T + i]) : T(0);
    d_s[tid] = i < a.d.T ? T(a.delta[bh * a.d.T + i]) : T(0);
  }
}

// One step of a row's online softmax over a tile, the row split over `parts` threads (this one `part`,
// `cols` columns of `srow`): the tile's max (partials in max_part, combined in a fixed order), the new running
// max, the weights e^(s - m) written through `put(c, w)`, and their sum; thread `part` 0 stores the state
// and alpha. Needs a barrier between the partials' write and read (taken here) and after it (the caller's).
template <typename T, int parts, typename Put>
__device__ __forceinline__ void online_softmax_step(const T* srow, int cols, int row, int part, T* max_part,
                                                    T* sum_part, T* m_s, T* l_s, T* alpha_s, Put&& put) {
  T tile_max = attn::neg_inf<T>();
  for (int c = 0; c < cols; ++c) tile_max = srow[c] > tile_max ? srow[c] : tile_max;
  max_part[row * parts + part] = tile_max;
  __syncthreads();
  tile_max = max_part[row * parts];
  for (int p = 1; p < parts; ++p) tile_max = max_part[row * parts + p] > tile_max ? max_part[row * parts + p] : tile_max;
  attn::SoftmaxState<T> st{m_s[row], l_s[row]};
  const T alpha = attn::softmax_rescale(st, tile_max);  // every thread of the row computes the same
  T sum = T(0);
  for (int c = 0; c < cols; ++c) {
    const T w = attn::softmax_weight(st, srow[c]);
    put(c, w);  // P V's operand; the sum is of the unrounded weights
    sum += w;
  }
  sum_part[row * parts + part] = sum;
  __syncthreads();
  if (part == 0) {
    T total = sum_part[row * parts];
    for (int p = 1; p < parts; ++p) total += sum_part[row * parts + p];
    attn::softmax_add(st, total);
    m_s[row] = st.m;
    l_s[row] = st.l;
    alpha_s[row] = alpha;
  }
}

// The backward's D_i = dO_i . O_i for the rows [q0, q0 + rows) of (b, h), each row split over `parts`
// threads (columns part, part + parts, ...), combined in order: into d_s and lse_s (the row's saved lse) in
// shared memory and delta. dO is read from `dout_tile` (row stride ld, as staged) when given, else from memory.
template <typename T, typename S, int ROWS, int parts>
__device__ __forceinline__ void row_deltas(const Args& a, int64_t bh, int64_t b, int64_t h, int64_t q0,
                                           const T* dout_tile, int ld, T* d_part, T* d_s, T* lse_s) {
  const int tid = threadIdx.x, row = tid / parts, part = tid % parts;
  const int64_t i = q0 + row;
  T partial = T(0);
  if (i < a.d.T) {
    const S* o_row = a.o.at<const S>(b, h, i);
    const S* do_row = a.dout.at<const S>(b, h, i);
    for (int64_t c = part; c < a.d.Dv; c += parts)
      partial += (dout_tile != nullptr ? dout_tile[row * ld + c] : widen<T>(do_row[c])) * widen<T>(o_row[c]);
  }
  d_part[row * parts + part] = partial;
  __syncthreads();
  if (part == 0) {
    T total = d_part[row * parts];
    for (int p = 1; p < parts; ++p) total += d_part[row * parts + p];
    d_s[row] = total;
    lse_s[row] = i < a.d.T ? T(a.lse[bh * a.d.T + i]) : T(0);
    if (i < a.d.T) a.delta[bh * a.d.T + i] = double(total);
  }
}

// ---- Host side.

// Calls fn(std::integral_constant<int, DMAX>{}) with the smallest DMAX of 16, 32, 64, 128 that holds the
// head sizes (Dh and Dv).
template <typename Fn>
void with_head_dim(int64_t head, Fn&& fn) {
  if (head <= 16)
    fn(std::integral_constant<int, 16>{});
  else if (head <= 32)
    fn(std::integral_constant<int, 32>{});
  else if (head <= 64)
    fn(std::integral_constant<int, 64>{});
  else if (head <= kMaxHeadDim)
    fn(std::integral_constant<int, 128>{});
  else {
    char message[200];
    std::snprintf(message, sizeof message,
                  "attention (CUDA, fused): head size %lld is larger than the fused kernels' %d; use the composed "
                  "attention (EMBER_ATTENTION=composed)",
                  static_cast<long long>(head), kMaxHeadDim);
    raise_message(message);
  }
}

inline int64_t head_size(const Dims& d) { return d.Dh > d.Dv ? d.Dh : d.Dv; }

// Shared memory above the default 48 KiB per block must be asked for, per kernel; more than the
// device allows per block is a clear error.
template <typename Kernel>
void reserve_shared(Kernel* kernel, size_t bytes, int device, const char* name) {
  if (bytes <= 48 * 1024) return;
  int limit = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > size_t(limit)) {
    char message[240];
    std::snprintf(message, sizeof message,
                  "attention (CUDA, fused): %s needs %zu bytes of shared memory per block, this GPU allows %d; use "
                  "the composed attention (EMBER_ATTENTION=composed)",
                  name, bytes, limit);
    raise_message(message);
  }
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

inline void check_blocks(int64_t blocks) {
  if (blocks > 2147483647)
    raise_message("attention (CUDA, fused): more than 2^31 - 1 blocks of B * heads * tiles; use the composed attention");
}

// The launchers of each family. dtype: the operands' (kFloat32, kFloat64, kBFloat16); mixed: bfloat16 products.
// probs (the forward, when asked for): [B, H, T, S] of the compute type (float32 when mixed).
void simt_forward(int device, int dtype, const Args& a, void* probs);
void simt_backward(int device, int dtype, const Args& a);
void tensor_core_forward(int device, int dtype, const Args& a);
void tensor_core_backward(int device, int dtype, const Args& a);

}  // namespace ember::cuda::attention
