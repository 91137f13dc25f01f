// Fused multi-head self-attention on the GPU, tiled like FlashAttention-2 (Dao 2023): forward and
// backward without ever writing the [B, H, T, T] scores or probabilities to GPU memory.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
//
// Layout (core/kernels.h; the CPU's kernels, core/cpu/attention.cpp, use the same): qkv [B, T, 3 D]
// (row t: q, then k, then v, each H heads of Dh columns side by side), out [B, T, D], key_padding_mask
// bool [B, T] (true = padding), causal hides key j > query i. lse and delta are float64 [B, H, T].
// Head h of q is the [T, Dh] block at column h * Dh with row stride 3 D: the kernels read it in place,
// no permute or copy.
//
// What it saves. The composed version (attention_reference: cuBLAS GEMMs + masked_fill + softmax)
// writes the scores, the masked scores and the probabilities, each [B, H, T, T] (32 MiB apiece in
// float32 for the recipe's B = 32, T = 256, H = 4), reads them back, keeps the probabilities for
// the backward and makes their gradients there: hundreds of MiB of memory traffic per layer, and
// the memory to hold it. Here each block keeps a [Br, Bc] tile of scores in shared memory (a few
// KiB), and the backward recomputes it from Q, K and the saved log-sum-exp: 7 products of the
// size of Q K^T in the backward instead of the composed version's 4 (S and dP are recomputed in
// each of its two kernels), for traffic of the order of Q, K, V, O and dO ([B, T, D] each, 4 MiB)
// times the number of tiles.
//
// The kernels, all with 256 threads seen as a 16 x 16 grid (ty = tid / 16, tx = tid % 16):
//
//   flash_forward_kernel     block (b, h, tile of Br query rows). Stages its Q tile in shared
//                            memory once, then loops over tiles of Bc keys: stages K and V,
//                            S = scale Q K^T (each thread a 16-strided RPT x CPT fragment), masks,
//                            updates each row's online softmax (core/online_softmax.h: running max
//                            m, running sum l; the accumulator is rescaled when m grows) and adds
//                            P V to the output accumulator, held in registers. Writes O and
//                            lse = m + log l. Key tiles that are all padding, or all in the future
//                            of every row of the tile (causal), are skipped: with IMDb's reviews
//                            padded to the batch's longest, a short review costs its own length.
//   flash_probs_kernel       the same S tiles, written out as p = e^(s - lse): only when the
//                            attention weights are asked for (the report), not for training.
//   flash_backward_dq_kernel block (b, h, tile of Br query rows). First D_i = dO_i . O_i (saved in
//                            delta for the next kernel), then over key tiles: recompute P from the
//                            saved lse, dP = dO V^T, dS = P (dP - D), dQ += dS K (in registers).
//   flash_backward_dkv_kernel block (b, h, tile of Bk keys). Over query tiles: P^T and dS^T
//                            recomputed the same way, dV += P^T dO, dK += dS^T Q (in registers).
//
// Why two backward kernels: dQ sums over keys and dK, dV sum over queries. One kernel per key
// tile (FlashAttention-2's backward) would have many blocks adding into the same dQ rows, which
// needs atomics, whose order (hence the rounding of the sum) changes from run to run. Giving dQ
// its own kernel, per query tile, makes every sum one thread's loop in a fixed order: the same
// input gives the same bits on every run, like every other kernel of this backend, at the price
// of computing S and dP twice (once per kernel).
//
// Precision: float32 computes and accumulates in float (like cuBLAS's float32 GEMMs), float64 in
// double. Mixed precision (bf16 or a bfloat16 qkv: forward_bf16 / backward_bf16): the operands of every
// product (Q, K, V, dO as they are staged, P and dS as they are written to shared memory) are rounded to
// bfloat16, the products summed in float; the scores, the online softmax, lse and D = dO . O stay float32
// (D from the unrounded dO), as a bf16 tensor-core kernel computes. Its tensors (qkv, O, dO, dqkv) are
// float32, or bfloat16 (S = BFloat16: read exactly, each result rounded once as it is stored).
// The flash_* kernels are plain CUDA (no warp shuffles, no tensor-core instructions, no atomics), the
// arithmetic on the CUDA cores; mixed precision runs by default on the tensor-core kernels of tc::
// (WMMA, which the CPU emulator of CUDA runs through its mma.h), the same algorithm and roundings.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <mma.h>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "core/kernels.h"
#include "core/online_softmax.h"
#include "cuda/dispatch.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

constexpr int kBlock = 256;     // threads per block, a 16 x 16 grid
constexpr int kGrid = 16;       // its side
constexpr int kMaxHeadDim = 128;

struct Dims {
  int64_t B, T, H, Dh, D;
  bool causal;
  int64_t window = -1, global = 0;  // the band (core/attention_band.h); window < 0: none, full attention
  bool bf16 = false;  // products' operands rounded to bfloat16 (float32 only)
};

// x, rounded to bfloat16 when `on` (float32; float64 is never rounded).
template <typename T>
__device__ __forceinline__ T bf16_if(bool on, T x) {
  if constexpr (std::is_same<T, float>::value) return on ? __bfloat162float(__float2bfloat16_rn(x)) : x;
  return x;
}

// Tile sizes for an element type and DMAX, the head size rounded up to 16, 32, 64 or 128 (the
// columns from Dh to DMAX are zero in shared memory, so every loop runs to the constant DMAX).
//   BR: query rows per block of the forward and dQ kernels;  BC: keys per tile there.
//   BK: keys per block of the dK/dV kernel;                  BQ: query rows per tile there.
// float64 (the tests' precision, not the training's) uses 32-row tiles so that the biggest
// configuration, DMAX = 128, still fits an A100's 163 KiB of shared memory per block.
template <typename T, int DMAX>
struct Tiles {
  static constexpr bool kDouble = sizeof(T) == 8;
  static constexpr int BR = kDouble ? 32 : 64;
  static constexpr int BC = (!kDouble && DMAX <= 32) ? 64 : 32;  // small heads: more keys per sync
  static constexpr int BK = kDouble ? 32 : 64;
  static constexpr int BQ = 32;
  static constexpr int LD = DMAX + 1;  // row stride of the [rows][DMAX] tiles: +1 spreads rows over the banks
};

// Shared memory of each kernel, in bytes (the layout is spelled out in each kernel).
template <typename T, int DMAX>
constexpr size_t forward_shared() {
  using C = Tiles<T, DMAX>;
  constexpr int parts = kBlock / C::BR;
  return sizeof(T) * (size_t(C::BR + 2 * C::BC) * C::LD + size_t(C::BR) * (C::BC + 1) + C::BR * (3 + 2 * parts)) +
         sizeof(int) * C::BC;
}
template <typename T, int DMAX>
constexpr size_t probs_shared() {
  using C = Tiles<T, DMAX>;
  return sizeof(T) * size_t(C::BR + C::BC) * C::LD + sizeof(int) * C::BC;
}
template <typename T, int DMAX>
constexpr size_t dq_shared() {
  using C = Tiles<T, DMAX>;
  constexpr int parts = kBlock / C::BR;
  return sizeof(T) * (size_t(2 * C::BR + 2 * C::BC) * C::LD + size_t(C::BR) * (C::BC + 1) + C::BR * (2 + parts)) +
         sizeof(int) * C::BC;
}
template <typename T, int DMAX>
constexpr size_t dkv_shared() {
  using C = Tiles<T, DMAX>;
  return sizeof(T) * (size_t(2 * C::BK + 2 * C::BQ) * C::LD + size_t(2 * C::BK) * (C::BQ + 1) + 2 * C::BQ) +
         sizeof(int) * C::BK;
}

// ---- Building blocks, run by all threads of a block.

// dst[r][c] (row stride DMAX + 1) = row first + r, column c of a [T, Dh] block of `src` whose rows
// are `stride` apart, for r < ROWS; zero past row T - 1 and past column Dh - 1. Consecutive threads
// read consecutive columns of a row (coalesced).
// round: each value rounded to bfloat16 (a product's operand in mixed precision).
template <typename T, int DMAX, int ROWS, typename S>
__device__ __forceinline__ void load_rows(T* dst, const S* src, int64_t stride, int64_t first, const Dims& d,
                                          bool round = false) {
  for (int idx = threadIdx.x; idx < ROWS * DMAX; idx += kBlock) {
    const int r = idx / DMAX, c = idx % DMAX;
    const int64_t row = first + r;
    dst[r * (DMAX + 1) + c] = (row < d.T && c < d.Dh) ? bf16_if(round, T(src[row * stride + c])) : T(0);
  }
}

// flags[c] = 1 where key first + c is masked for every query (padding, or past the end), else 0.
template <int COLS>
__device__ __forceinline__ void load_key_flags(int* flags, const bool* pad_row, int64_t first, int64_t T_len) {
  for (int c = threadIdx.x; c < COLS; c += kBlock) {
    const int64_t j = first + c;
    flags[c] = (j >= T_len || (pad_row != nullptr && pad_row[j])) ? 1 : 0;
  }
}

// The key tile starting at key k0 into shared memory: its K rows, its V rows, its padding flags.
// q points at row 0 of this head's q (k at + D, v at + 2D, rows 3D apart).
template <typename T, int DMAX, int ROWS, typename S>
__device__ __forceinline__ void load_key_tile(T* Ks, T* Vs, int* kflag, const S* q, const bool* pad_row, int64_t k0,
                                              const Dims& d) {
  load_rows<T, DMAX, ROWS>(Ks, q + d.D, 3 * d.D, k0, d, d.bf16);
  load_rows<T, DMAX, ROWS>(Vs, q + 2 * d.D, 3 * d.D, k0, d, d.bf16);
  load_key_flags<ROWS>(kflag, pad_row, k0, d.T);
}

// Whether keys first .. first + COLS - 1 hold any that is not padding. Every thread reads the same
// bytes (a broadcast), so every thread gets the same answer and a block skips a tile as one.
template <int COLS>
__device__ __forceinline__ bool any_key_live(const bool* pad_row, int64_t first, int64_t T_len) {
  const int64_t end = first + COLS < T_len ? first + COLS : T_len;
  if (pad_row == nullptr) return first < end;
  for (int64_t j = first; j < end; ++j)
    if (!pad_row[j]) return true;
  return false;
}

// The thread's fragment of A B^T for two shared tiles of row stride DMAX + 1:
// s[r][c] = sum_k A[ty + 16 r][k] * B[tx + 16 c][k], k = 0 .. DMAX - 1 in order. Within a warp A's
// reads are two broadcasts and B's 16 rows fall in 16 different banks (the +1 of the stride).
template <typename T, int DMAX, int RPT, int CPT>
__device__ __forceinline__ void tile_dot(T (&s)[RPT][CPT], const T* A, const T* Bm, int ty, int tx) {
  for (int r = 0; r < RPT; ++r)
    for (int c = 0; c < CPT; ++c) s[r][c] = T(0);
  for (int k = 0; k < DMAX; ++k) {
    T a[RPT], b[CPT];
    for (int r = 0; r < RPT; ++r) a[r] = A[(ty + kGrid * r) * (DMAX + 1) + k];
    for (int c = 0; c < CPT; ++c) b[c] = Bm[(tx + kGrid * c) * (DMAX + 1) + k];
    for (int r = 0; r < RPT; ++r)
      for (int c = 0; c < CPT; ++c) s[r][c] += a[r] * b[c];
  }
}

// acc[r][o] += sum_j P[ty + 16 r][j] * V[j][tx + 16 o], j = 0 .. COLS - 1 in order; P has row stride
// ldp, V row stride DMAX + 1 (consecutive tx read consecutive columns: no bank conflict).
template <typename T, int DMAX, int RPT, int COLS>
__device__ __forceinline__ void tile_accumulate(T (&acc)[RPT][DMAX / kGrid], const T* P, int ldp, const T* V, int ty,
                                                int tx) {
  constexpr int OPT = DMAX / kGrid;
  for (int j = 0; j < COLS; ++j) {
    T p[RPT], v[OPT];
    for (int r = 0; r < RPT; ++r) p[r] = P[(ty + kGrid * r) * ldp + j];
    for (int o = 0; o < OPT; ++o) v[o] = V[j * (DMAX + 1) + tx + kGrid * o];
    for (int r = 0; r < RPT; ++r)
      for (int o = 0; o < OPT; ++o) acc[r][o] += p[r] * v[o];
  }
}

// Whether key j is hidden from query i: padding, the future (causal), outside the window.
__device__ __forceinline__ bool masked_at(const Dims& d, bool key_is_padding, int64_t i, int64_t j) {
  return attn::key_masked(key_is_padding, d.causal, i, j) || attn::outside_window(d.window, d.global, i, j);
}

// Whether any query of [q0, q0 + rows) may see any key of [k0, k0 + cols) through the window: a tile
// outside the band (no global row or key, every pair more than `window` apart) is skipped whole.
__device__ __forceinline__ bool tile_in_band(const Dims& d, int64_t q0, int rows, int64_t k0, int cols) {
  if (d.window < 0 || q0 < d.global || k0 < d.global) return true;
  return k0 <= q0 + rows - 1 + d.window && k0 + cols - 1 >= q0 - d.window;
}

// The first key tile past every query row of [q0, q0 + rows) (causal: the later ones are all in the
// future of every row), or all key tiles.
__device__ __forceinline__ int64_t key_tiles_for(const Dims& d, int64_t q0, int rows, int bc) {
  const int64_t n = (d.T + bc - 1) / bc;
  if (!d.causal) return n;
  const int64_t last_row = (q0 + rows < d.T ? q0 + rows : d.T) - 1;
  const int64_t end = last_row / bc + 1;
  return end < n ? end : n;
}

// ---- Forward. Block (b, h, query tile qt): blockIdx.x = (b * H + h) * n_query_tiles + qt.
// Shared memory (T = float or double):
//   Qs [BR][DMAX+1]   the block's queries, loaded once
//   Ks [BC][DMAX+1]   the current key tile
//   Vs [BC][DMAX+1]   the current value tile
//   Ss [BR][BC+1]     the score tile, then (in place) its unnormalised weights e^(s - m)
//   m_s, l_s, alpha_s [BR]: each row's online-softmax state and this tile's rescale factor
//   max_part, sum_part [BR][parts]: each row's partial max / sum, one per thread of the row
//   kflag [BC] (int)  1 = key masked for every query (padding or past T)
// The softmax of a row is done by parts = 256 / BR threads (4 in float32), each over BC / parts
// columns; their partial results are combined in a fixed order.
template <typename T, int DMAX, typename S = T>
__global__ void flash_forward_kernel(const S* qkv, const bool* pad, Dims d, T scale, S* out, double* lse) {
  using C = Tiles<T, DMAX>;
  constexpr int BR = C::BR, BC = C::BC, LD = C::LD, SLD = BC + 1;
  constexpr int RPT = BR / kGrid, CPT = BC / kGrid, OPT = DMAX / kGrid;
  constexpr int parts = kBlock / BR, cols_per_part = BC / parts;
  extern __shared__ double shared_mem[];
  T* Qs = reinterpret_cast<T*>(shared_mem);
  T* Ks = Qs + BR * LD;
  T* Vs = Ks + BC * LD;
  T* Ss = Vs + BC * LD;
  T* m_s = Ss + BR * SLD;
  T* l_s = m_s + BR;
  T* alpha_s = l_s + BR;
  T* max_part = alpha_s + BR;
  T* sum_part = max_part + BR * parts;
  int* kflag = reinterpret_cast<int*>(sum_part + BR * parts);

  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int row = tid / parts, part = tid % parts;  // this thread's share of the softmax
  const int64_t n_qt = (d.T + BR - 1) / BR;
  const int64_t qt = blockIdx.x % n_qt, bh = blockIdx.x / n_qt, h = bh % d.H, b = bh / d.H;
  const int64_t q0 = qt * BR, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;  // row t of q: q + t * 3D; k at + D, v at + 2D
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;

  load_rows<T, DMAX, BR>(Qs, q, row_stride, q0, d, d.bf16);
  if (tid < BR) {
    const attn::SoftmaxState<T> st = attn::softmax_start<T>();
    m_s[tid] = st.m;
    l_s[tid] = st.l;
  }
  T acc[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) acc[r][o] = T(0);

  const int64_t kt_end = key_tiles_for(d, q0, BR, BC);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * BC;
    if (!any_key_live<BC>(pad_row, k0, d.T)) continue;  // all padding: no weight, nothing to add
    if (!tile_in_band(d, q0, BR, k0, BC)) continue;      // outside the window: likewise
    __syncthreads();  // the previous tile's Ks, Vs, Ss and kflag are no longer read (and Qs is loaded)
    load_key_tile<T, DMAX, BC>(Ks, Vs, kflag, q, pad_row, k0, d);
    __syncthreads();

    // 1. Scores: S = scale Q K^T, -inf where masked.
    T s[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Qs, Ks, ty, tx);
    for (int r = 0; r < RPT; ++r)
      for (int c = 0; c < CPT; ++c) {
        const int i = ty + kGrid * r, j = tx + kGrid * c;
        const bool masked = masked_at(d, kflag[j] != 0, q0 + i, k0 + j);
        Ss[i * SLD + j] = masked ? attn::neg_inf<T>() : scale * s[r][c];
      }
    __syncthreads();

    // 2. Online softmax, row `row` split over `parts` threads: the tile's max, the new running
    //    max, weights e^(s - m) written over the scores, and their sum.
    T* srow = Ss + row * SLD + part * cols_per_part;
    T tile_max = attn::neg_inf<T>();
    for (int c = 0; c < cols_per_part; ++c) tile_max = srow[c] > tile_max ? srow[c] : tile_max;
    max_part[row * parts + part] = tile_max;
    __syncthreads();
    tile_max = max_part[row * parts];
    for (int p = 1; p < parts; ++p) tile_max = max_part[row * parts + p] > tile_max ? max_part[row * parts + p] : tile_max;
    attn::SoftmaxState<T> st{m_s[row], l_s[row]};
    const T alpha = attn::softmax_rescale(st, tile_max);  // every thread of the row computes the same
    T sum = T(0);
    for (int c = 0; c < cols_per_part; ++c) {
      const T w = attn::softmax_weight(st, srow[c]);
      srow[c] = bf16_if(d.bf16, w);  // P V's operand; the sum is of the float32 weights
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
    __syncthreads();

    // 3. O = alpha O + P V, in registers.
    for (int r = 0; r < RPT; ++r) {
      const T a = alpha_s[ty + kGrid * r];
      for (int o = 0; o < OPT; ++o) acc[r][o] *= a;
    }
    tile_accumulate<T, DMAX, RPT, BC>(acc, Ss, SLD, Vs, ty, tx);
  }
  __syncthreads();  // m_s, l_s final (also when every tile was skipped)

  // Write O = acc / l (0 for a row with no unmasked key) and lse.
  for (int r = 0; r < RPT; ++r) {
    const int i = ty + kGrid * r;
    if (q0 + i >= d.T) continue;
    const T norm = attn::softmax_norm(attn::SoftmaxState<T>{m_s[i], l_s[i]});
    S* o_row = out + (b * d.T + q0 + i) * d.D + h * d.Dh;
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dh) o_row[tx + kGrid * o] = S(acc[r][o] * norm);
  }
  if (tid < BR && q0 + tid < d.T) lse[bh * d.T + q0 + tid] = double(attn::softmax_lse(attn::SoftmaxState<T>{m_s[tid], l_s[tid]}));
}

// ---- The attention weights, when asked for: probs[b, h, i, j] = e^(s_ij - lse_i), every key
// tile (masked entries are written as 0, so every entry of a row with no unmasked key is 0, like the CPU).
// Shared: Qs [BR][DMAX+1], Ks [BC][DMAX+1], kflag [BC]. One block per BR-row query tile of one (batch,
// head), as flash_forward_kernel: its 16 x 16 threads each write RPT x CPT entries of every key tile.
template <typename T, int DMAX, typename S = T>
__global__ void flash_probs_kernel(const S* qkv, const bool* pad, Dims d, T scale, const double* lse, T* probs) {
  using C = Tiles<T, DMAX>;
  constexpr int BR = C::BR, BC = C::BC, LD = C::LD, RPT = BR / kGrid, CPT = BC / kGrid;
  extern __shared__ double shared_mem[];
  T* Qs = reinterpret_cast<T*>(shared_mem);
  T* Ks = Qs + BR * LD;
  int* kflag = reinterpret_cast<int*>(Ks + BC * LD);
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int64_t n_qt = (d.T + BR - 1) / BR;
  const int64_t qt = blockIdx.x % n_qt, bh = blockIdx.x / n_qt, h = bh % d.H, b = bh / d.H;
  const int64_t q0 = qt * BR, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;
  load_rows<T, DMAX, BR>(Qs, q, row_stride, q0, d);
  T row_lse[RPT];
  for (int r = 0; r < RPT; ++r) {
    const int64_t i = q0 + ty + kGrid * r;
    row_lse[r] = i < d.T ? T(lse[bh * d.T + i]) : T(0);
  }
  const int64_t n_kt = (d.T + BC - 1) / BC;
  for (int64_t kt = 0; kt < n_kt; ++kt) {
    const int64_t k0 = kt * BC;
    __syncthreads();
    load_rows<T, DMAX, BC>(Ks, q + d.D, row_stride, k0, d);
    load_key_flags<BC>(kflag, pad_row, k0, d.T);
    __syncthreads();
    T s[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Qs, Ks, ty, tx);
    for (int r = 0; r < RPT; ++r) {
      const int64_t i = q0 + ty + kGrid * r;
      if (i >= d.T) continue;
      for (int c = 0; c < CPT; ++c) {
        const int64_t j = k0 + tx + kGrid * c;
        if (j >= d.T) continue;
        const bool masked = masked_at(d, kflag[tx + kGrid * c] != 0, i, j);
        probs[(bh * d.T + i) * d.T + j] = attn::softmax_prob(masked, scale * s[r][c], row_lse[r]);
      }
    }
  }
}

// ---- Backward, kernel 1 of 2. Block (b, h, query tile qt), like the forward's blocks. Writes dQ
// of its rows and delta (D_i) for kernel 2. Shared:
//   Qs, dOs [BR][DMAX+1]   the block's queries and output gradients, loaded once
//   Ks, Vs  [BC][DMAX+1]   the current key and value tiles
//   dSs     [BR][BC+1]     dS = P (dP - D) of the tile
//   lse_s, d_s [BR]        each row's saved lse and D
//   d_part  [BR][parts]    partial sums of D
//   kflag   [BC] (int)
template <typename T, int DMAX, typename S = T>
__global__ void flash_backward_dq_kernel(const S* qkv, const bool* pad, Dims d, T scale, const S* out, const S* dout,
                             const double* lse, double* delta, S* dqkv) {
  using C = Tiles<T, DMAX>;
  constexpr int BR = C::BR, BC = C::BC, LD = C::LD, SLD = BC + 1;
  constexpr int RPT = BR / kGrid, CPT = BC / kGrid, OPT = DMAX / kGrid, parts = kBlock / BR;
  extern __shared__ double shared_mem[];
  T* Qs = reinterpret_cast<T*>(shared_mem);
  T* dOs = Qs + BR * LD;
  T* Ks = dOs + BR * LD;
  T* Vs = Ks + BC * LD;
  T* dSs = Vs + BC * LD;
  T* lse_s = dSs + BR * SLD;
  T* d_s = lse_s + BR;
  T* d_part = d_s + BR;
  int* kflag = reinterpret_cast<int*>(d_part + BR * parts);

  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int64_t n_qt = (d.T + BR - 1) / BR;
  const int64_t qt = blockIdx.x % n_qt, bh = blockIdx.x / n_qt, h = bh % d.H, b = bh / d.H;
  const int64_t q0 = qt * BR, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;
  const S* o_head = out + b * d.T * d.D + h * d.Dh;  // row t: o_head + t * D
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;

  load_rows<T, DMAX, BR>(Qs, q, row_stride, q0, d, d.bf16);
  load_rows<T, DMAX, BR>(dOs, dout + b * d.T * d.D + h * d.Dh, d.D, q0, d);  // rounded after D below
  __syncthreads();
  // D_i = dO_i . O_i, row split over `parts` threads (columns part, part + parts, ...), combined in order.
  {
    const int row = tid / parts, part = tid % parts;
    const int64_t i = q0 + row;
    T partial = T(0);
    if (i < d.T)
      for (int64_t c = part; c < d.Dh; c += parts) partial += dOs[row * LD + c] * T(o_head[i * d.D + c]);
    d_part[row * parts + part] = partial;
    __syncthreads();
    if (part == 0) {
      T total = d_part[row * parts];
      for (int p = 1; p < parts; ++p) total += d_part[row * parts + p];
      d_s[row] = total;
      lse_s[row] = i < d.T ? T(lse[bh * d.T + i]) : T(0);
      if (i < d.T) delta[bh * d.T + i] = double(total);
    }
  }
  if (d.bf16) {  // dO as the operand of dP = dO V^T, now that D has used the float32 values
    __syncthreads();
    for (int idx = tid; idx < BR * DMAX; idx += kBlock) {
      T& x = dOs[(idx / DMAX) * LD + idx % DMAX];
      x = bf16_if(true, x);
    }
  }
  T acc[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) acc[r][o] = T(0);

  const int64_t kt_end = key_tiles_for(d, q0, BR, BC);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * BC;
    if (!any_key_live<BC>(pad_row, k0, d.T) || !tile_in_band(d, q0, BR, k0, BC)) continue;
    __syncthreads();  // previous tile done; d_s and lse_s written
    load_key_tile<T, DMAX, BC>(Ks, Vs, kflag, q, pad_row, k0, d);
    __syncthreads();
    T s[RPT][CPT], dp[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Qs, Ks, ty, tx);    // the forward's scores, bit for bit
    tile_dot<T, DMAX, RPT, CPT>(dp, dOs, Vs, ty, tx);  // dP = dO V^T
    for (int r = 0; r < RPT; ++r)
      for (int c = 0; c < CPT; ++c) {
        const int i = ty + kGrid * r, j = tx + kGrid * c;
        const bool masked = q0 + i >= d.T || masked_at(d, kflag[j] != 0, q0 + i, k0 + j);
        const T p = attn::softmax_prob(masked, scale * s[r][c], lse_s[i]);
        dSs[i * SLD + j] = bf16_if(d.bf16, attn::softmax_grad_score(p, dp[r][c], d_s[i]));
      }
    __syncthreads();
    tile_accumulate<T, DMAX, RPT, BC>(acc, dSs, SLD, Ks, ty, tx);  // dQ += dS K
  }
  for (int r = 0; r < RPT; ++r) {
    const int64_t i = q0 + ty + kGrid * r;
    if (i >= d.T) continue;
    S* dq = dqkv + (b * d.T + i) * row_stride + h * d.Dh;
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dh) dq[tx + kGrid * o] = S(scale * acc[r][o]);
  }
}

// ---- Backward, kernel 2 of 2. Block (b, h, key tile kt): blockIdx.x = (b * H + h) * n_key_tiles
// + kt. Writes dK and dV of its keys, summing over query tiles (causal: only those at or after the
// key tile). Here the thread grid's rows are keys and its columns queries. Shared:
//   Ks, Vs  [BK][DMAX+1]   the block's keys and values, loaded once
//   Qs, dOs [BQ][DMAX+1]   the current query tile and its output gradients
//   Ps, dSs [BK][BQ+1]     P^T and dS^T of the tile
//   lse_s, d_s [BQ]        the query rows' lse and D (from kernel 1)
//   kflag   [BK] (int)
template <typename T, int DMAX, typename S = T>
__global__ void flash_backward_dkv_kernel(const S* qkv, const bool* pad, Dims d, T scale, const S* dout, const double* lse,
                              const double* delta, S* dqkv) {
  using C = Tiles<T, DMAX>;
  constexpr int BK = C::BK, BQ = C::BQ, LD = C::LD, PLD = BQ + 1;
  constexpr int RPT = BK / kGrid, CPT = BQ / kGrid, OPT = DMAX / kGrid;
  extern __shared__ double shared_mem[];
  T* Ks = reinterpret_cast<T*>(shared_mem);
  T* Vs = Ks + BK * LD;
  T* Qs = Vs + BK * LD;
  T* dOs = Qs + BQ * LD;
  T* Ps = dOs + BQ * LD;
  T* dSs = Ps + BK * PLD;
  T* lse_s = dSs + BK * PLD;
  T* d_s = lse_s + BQ;
  int* kflag = reinterpret_cast<int*>(d_s + BQ);

  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int64_t n_kt = (d.T + BK - 1) / BK;
  const int64_t kt = blockIdx.x % n_kt, bh = blockIdx.x / n_kt, h = bh % d.H, b = bh / d.H;
  const int64_t k0 = kt * BK, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;
  const S* do_head = dout + b * d.T * d.D + h * d.Dh;
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;

  load_key_tile<T, DMAX, BK>(Ks, Vs, kflag, q, pad_row, k0, d);
  T dk[RPT][OPT], dv[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) dk[r][o] = dv[r][o] = T(0);

  // No query sees a key tile that is all padding: its dK and dV are 0, and the loop is skipped.
  const int64_t n_qt = any_key_live<BK>(pad_row, k0, d.T) ? (d.T + BQ - 1) / BQ : 0;
  const int64_t qt_begin = d.causal ? k0 / BQ : 0;  // causal: rows before k0 see none of these keys
  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int64_t i0 = qt * BQ;
    if (!tile_in_band(d, i0, BQ, k0, BK)) continue;  // no query of the tile sees these keys
    __syncthreads();  // the previous tile is no longer read (and Ks, Vs, kflag are loaded)
    load_rows<T, DMAX, BQ>(Qs, q, row_stride, i0, d, d.bf16);
    load_rows<T, DMAX, BQ>(dOs, do_head, d.D, i0, d, d.bf16);
    if (tid < BQ) {
      const int64_t i = i0 + tid;
      lse_s[tid] = i < d.T ? T(lse[bh * d.T + i]) : T(0);
      d_s[tid] = i < d.T ? T(delta[bh * d.T + i]) : T(0);
    }
    __syncthreads();
    T s[RPT][CPT], dp[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Ks, Qs, ty, tx);    // S^T: the same products as the forward's S
    tile_dot<T, DMAX, RPT, CPT>(dp, Vs, dOs, ty, tx);  // dP^T = V dO^T
    for (int r = 0; r < RPT; ++r)
      for (int c = 0; c < CPT; ++c) {
        const int j = ty + kGrid * r, i = tx + kGrid * c;
        const bool masked = i0 + i >= d.T || masked_at(d, kflag[j] != 0, i0 + i, k0 + j);
        const T p = attn::softmax_prob(masked, scale * s[r][c], lse_s[i]);
        Ps[j * PLD + i] = bf16_if(d.bf16, p);
        dSs[j * PLD + i] = bf16_if(d.bf16, attn::softmax_grad_score(p, dp[r][c], d_s[i]));
      }
    __syncthreads();
    tile_accumulate<T, DMAX, RPT, BQ>(dv, Ps, PLD, dOs, ty, tx);  // dV += P^T dO
    tile_accumulate<T, DMAX, RPT, BQ>(dk, dSs, PLD, Qs, ty, tx);  // dK += dS^T Q
  }
  for (int r = 0; r < RPT; ++r) {
    const int64_t j = k0 + ty + kGrid * r;
    if (j >= d.T) continue;
    S* dk_row = dqkv + (b * d.T + j) * row_stride + d.D + h * d.Dh;
    S* dv_row = dk_row + d.D;
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dh) {
        dk_row[tx + kGrid * o] = S(scale * dk[r][o]);
        dv_row[tx + kGrid * o] = S(dv[r][o]);
      }
  }
}

// ---- Tensor cores for mixed precision (forward_bf16 / backward_bf16, on a GPU of
// compute capability 8.0 or more, unless EMBER_ATTENTION_TENSOR_CORES=off). The same algorithm and the
// same roundings as the kernels above with d.bf16 (Q, K, V, dO rounded to bfloat16 as they are staged,
// P and dS as they are written; the scores, the online softmax, lse and D in float32), but every product
// is WMMA's m16n16k16 (bfloat16 operands, float accumulation) on the tensor cores instead of a loop of
// float multiply-adds on the CUDA cores. A fragment's layout over the warp's lanes is unspecified, so the
// kernels never touch one element-wise: a product's result is stored to a float tile in shared memory,
// the softmax and the masks work there with any thread on any element, and its bfloat16 result is loaded
// as the next product's operand. What must live across key tiles does so where its layout is known: the
// forward's output accumulator in each thread's registers (rescaled by the online softmax's alpha, a
// per-row factor a fragment cannot be given), the backward's dQ, dK and dV in fragments (plain sums).
// 256 threads = 8 warps; each product's 16 x 16 output tiles are dealt to the warps in turn.
// Tiles: 64 query rows by 64 keys in every kernel (the dK/dV kernel: 64 keys by 64 query rows).
namespace tc {

using Bf16 = __nv_bfloat16;
using FragA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, Bf16, nvcuda::wmma::row_major>;
using FragB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Bf16, nvcuda::wmma::row_major>;
using FragBt = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, Bf16, nvcuda::wmma::col_major>;
using FragC = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

constexpr int kWarps = kBlock / 32;
constexpr int kRows = 64;  // query rows (keys in the dK/dV kernel) per block
constexpr int kCols = 64;  // keys (query rows in the dK/dV kernel) per tile
constexpr int kLds = kCols + 4;  // row stride of the float score tiles (WMMA: a multiple of 4 floats)
constexpr int kLdp = kCols + 8;  // of the bfloat16 weight tiles (a multiple of 8 bfloat16)
constexpr int kParts = kBlock / kRows;  // threads per row in the forward's softmax and in D
constexpr size_t kAlign = 128;          // every array's start (WMMA needs 32 bytes)

constexpr size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Loops over a warp's fragments unrolled, so that each fragment is a register, not local memory
// (nvcc; the emulator's g++ has no such pragma and needs none).
#if defined(__CUDACC__)
#define EMBER_UNROLL _Pragma("unroll")
#else
#define EMBER_UNROLL
#endif

template <int DMAX>
struct Strides {
  static constexpr int H = DMAX + 8;  // the bfloat16 [rows][DMAX] operand tiles
  static constexpr int O = DMAX + 4;  // the float [rows][DMAX] output tiles
};

// The dynamic shared memory, its start rounded up to kAlign (each kernel asks for kAlign more bytes).
__device__ __forceinline__ unsigned char* aligned_shared(void* base) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(base);
  return reinterpret_cast<unsigned char*>((p + kAlign - 1) / kAlign * kAlign);
}

// Byte offsets of each kernel's arrays (each starts kAlign-aligned), and the bytes to ask for.
template <int DMAX>
struct ForwardLayout {
  static constexpr size_t q = 0;                                               // Qh [kRows][H] bf16
  static constexpr size_t k = q + aligned(2 * kRows * Strides<DMAX>::H);       // Kh [kCols][H] bf16
  static constexpr size_t v = k + aligned(2 * kCols * Strides<DMAX>::H);       // Vh [kCols][H] bf16
  static constexpr size_t s = v + aligned(2 * kCols * Strides<DMAX>::H);       // Ss [kRows][kLds] float
  static constexpr size_t p = s + aligned(4 * kRows * kLds);                   // Ph [kRows][kLdp] bf16
  static constexpr size_t pv = p + aligned(2 * kRows * kLdp);                  // PVs [kRows][O] float
  static constexpr size_t stats = pv + aligned(4 * kRows * Strides<DMAX>::O);  // m, l, alpha, max/sum parts
  static constexpr size_t flags = stats + aligned(4 * kRows * (3 + 2 * kParts));  // kflag [kCols] int
  static constexpr size_t bytes = flags + aligned(4 * kCols) + kAlign;
};
template <int DMAX>
struct BackwardLayout {  // both backward kernels: two bf16 [rows] tiles, two bf16 [cols] tiles, ...
  static constexpr size_t a = 0;                                                // Qh (dQ) or Kh (dK/dV)
  static constexpr size_t b = a + aligned(2 * kRows * Strides<DMAX>::H);       // dOh or Vh
  static constexpr size_t c = b + aligned(2 * kRows * Strides<DMAX>::H);       // Kh or Qh
  static constexpr size_t d = c + aligned(2 * kCols * Strides<DMAX>::H);       // Vh or dOh
  static constexpr size_t s = d + aligned(2 * kCols * Strides<DMAX>::H);       // Ss [kRows][kLds] float
  static constexpr size_t dp = s + aligned(4 * kRows * kLds);                  // dPs, likewise
  static constexpr size_t p = dp + aligned(4 * kRows * kLds);                  // Ph [kRows][kLdp] bf16
  static constexpr size_t ds = p + aligned(2 * kRows * kLdp);                  // dSh, likewise
  static constexpr size_t stats = ds + aligned(2 * kRows * kLdp);              // lse, D, D's parts
  static constexpr size_t flags = stats + aligned(4 * kRows * (2 + kParts));   // kflag [kRows or kCols] int
  static constexpr size_t bytes = flags + aligned(4 * kRows) + kAlign;
  // The float [kRows][O] tile the results leave through, over Ss and dPs once the loop is done.
  static_assert(2 * aligned(4 * kRows * kLds) >= 4 * kRows * Strides<DMAX>::O, "the output tile fits Ss and dPs");
};

// dst[r][c] (row stride H) = element (first + r, c) of a [T, Dh] block of `src` (rows `stride` apart),
// rounded to bfloat16 (exact for a bfloat16 source), for r < ROWS; zero past row T - 1 and column Dh - 1.
template <int DMAX, int ROWS, typename S>
__device__ __forceinline__ void load_rows_bf16(Bf16* dst, const S* src, int64_t stride, int64_t first, const Dims& d) {
  for (int idx = threadIdx.x; idx < ROWS * DMAX; idx += kBlock) {
    const int r = idx / DMAX, c = idx % DMAX;
    const int64_t row = first + r;
    dst[r * Strides<DMAX>::H + c] = __float2bfloat16_rn((row < d.T && c < d.Dh) ? float(src[row * stride + c]) : 0.0f);
  }
}

// C [M][N] (float, row stride ldc) = A B^T for bfloat16 row-major A [M][K] and B [N][K]: B read as a
// column-major K x N operand. Each warp makes every kWarps-th 16 x 16 tile of C.
template <int M, int N, int K>
__device__ __forceinline__ void product_abt(float* C, int ldc, const Bf16* A, int lda, const Bf16* B, int ldb) {
  constexpr int tiles_n = N / 16;
  for (int t = threadIdx.x / 32; t < (M / 16) * tiles_n; t += kWarps) {
    const int tm = t / tiles_n, tn = t % tiles_n;
    FragC c;
    nvcuda::wmma::fill_fragment(c, 0.0f);
    EMBER_UNROLL
    for (int k = 0; k < K; k += 16) {
      FragA a;
      FragBt b;
      nvcuda::wmma::load_matrix_sync(a, A + tm * 16 * lda + k, lda);
      nvcuda::wmma::load_matrix_sync(b, B + tn * 16 * ldb + k, ldb);
      nvcuda::wmma::mma_sync(c, a, b, c);
    }
    nvcuda::wmma::store_matrix_sync(C + tm * 16 * ldc + tn * 16, c, ldc, nvcuda::wmma::mem_row_major);
  }
}

// The warp's tiles of an [M][N] result, kept in fragments across calls: tile warp + kWarps i for i < PER.
template <int M, int N>
struct WarpTiles {
  static constexpr int count = (M / 16) * (N / 16);
  static constexpr int PER = (count + kWarps - 1) / kWarps;
  FragC acc[PER];
  __device__ __forceinline__ void zero() {
    EMBER_UNROLL
    for (int i = 0; i < PER; ++i)
      if (threadIdx.x / 32 + kWarps * i < count) nvcuda::wmma::fill_fragment(acc[i], 0.0f);
  }
  // acc += A B for bfloat16 row-major A [M][K] and B [K][N].
  template <int K>
  __device__ __forceinline__ void add_product(const Bf16* A, int lda, const Bf16* B, int ldb) {
    EMBER_UNROLL
    for (int i = 0; i < PER; ++i) {
      const int t = threadIdx.x / 32 + kWarps * i;
      if (t >= count) continue;  // the same for every lane of the warp
      const int tm = t / (N / 16), tn = t % (N / 16);
      EMBER_UNROLL
      for (int k = 0; k < K; k += 16) {
        FragA a;
        FragB b;
        nvcuda::wmma::load_matrix_sync(a, A + tm * 16 * lda + k, lda);
        nvcuda::wmma::load_matrix_sync(b, B + k * ldb + tn * 16, ldb);
        nvcuda::wmma::mma_sync(acc[i], a, b, acc[i]);
      }
    }
  }
  __device__ __forceinline__ void store(float* C, int ldc) const {
    EMBER_UNROLL
    for (int i = 0; i < PER; ++i) {
      const int t = threadIdx.x / 32 + kWarps * i;
      if (t < count)
        nvcuda::wmma::store_matrix_sync(C + (t / (N / 16)) * 16 * ldc + (t % (N / 16)) * 16, acc[i], ldc,
                                        nvcuda::wmma::mem_row_major);
    }
  }
};

// Builds for a GPU without bfloat16 WMMA (compute capability below 8.0) compile the kernels empty; the
// host never launches them there (tensor_cores_usable).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define EMBER_TC_KERNEL_BODY 0
#else
#define EMBER_TC_KERNEL_BODY 1
#endif

// ---- Forward. Block (b, h, query tile): blockIdx.x = (b * H + h) * n_query_tiles + qt, as flash_forward_kernel.
template <int DMAX, typename S>
__global__ void __launch_bounds__(kBlock) forward_kernel(const S* qkv, const bool* pad, Dims d, float scale, S* out,
                                                         double* lse) {
#if EMBER_TC_KERNEL_BODY
  using L = ForwardLayout<DMAX>;
  constexpr int H = Strides<DMAX>::H, LDO = Strides<DMAX>::O;
  constexpr int RPT = kRows / kGrid, OPT = DMAX / kGrid, cols_per_part = kCols / kParts;
  extern __shared__ double shared_mem[];
  unsigned char* base = aligned_shared(shared_mem);
  Bf16* Qh = reinterpret_cast<Bf16*>(base + L::q);
  Bf16* Kh = reinterpret_cast<Bf16*>(base + L::k);
  Bf16* Vh = reinterpret_cast<Bf16*>(base + L::v);
  float* Ss = reinterpret_cast<float*>(base + L::s);
  Bf16* Ph = reinterpret_cast<Bf16*>(base + L::p);
  float* PVs = reinterpret_cast<float*>(base + L::pv);
  float* m_s = reinterpret_cast<float*>(base + L::stats);
  float* l_s = m_s + kRows;
  float* alpha_s = l_s + kRows;
  float* max_part = alpha_s + kRows;
  float* sum_part = max_part + kRows * kParts;
  int* kflag = reinterpret_cast<int*>(base + L::flags);

  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int row = tid / kParts, part = tid % kParts;
  const int64_t n_qt = (d.T + kRows - 1) / kRows;
  const int64_t qt = blockIdx.x % n_qt, bh = blockIdx.x / n_qt, h = bh % d.H, b = bh / d.H;
  const int64_t q0 = qt * kRows, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;

  load_rows_bf16<DMAX, kRows>(Qh, q, row_stride, q0, d);
  if (tid < kRows) {
    const attn::SoftmaxState<float> st = attn::softmax_start<float>();
    m_s[tid] = st.m;
    l_s[tid] = st.l;
  }
  float acc[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) acc[r][o] = 0.0f;

  const int64_t kt_end = key_tiles_for(d, q0, kRows, kCols);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * kCols;
    if (!any_key_live<kCols>(pad_row, k0, d.T) || !tile_in_band(d, q0, kRows, k0, kCols)) continue;
    __syncthreads();  // the previous tile's Kh, Vh, Ph, PVs and kflag are no longer read (and Qh is loaded)
    load_rows_bf16<DMAX, kCols>(Kh, q + d.D, row_stride, k0, d);
    load_rows_bf16<DMAX, kCols>(Vh, q + 2 * d.D, row_stride, k0, d);
    load_key_flags<kCols>(kflag, pad_row, k0, d.T);
    __syncthreads();

    // 1. Scores on the tensor cores, then scaled and masked in shared memory.
    product_abt<kRows, kCols, DMAX>(Ss, kLds, Qh, H, Kh, H);
    __syncthreads();
    for (int idx = tid; idx < kRows * kCols; idx += kBlock) {
      const int i = idx / kCols, j = idx % kCols;
      float& s = Ss[i * kLds + j];
      s = masked_at(d, kflag[j] != 0, q0 + i, k0 + j) ? attn::neg_inf<float>() : scale * s;
    }
    __syncthreads();

    // 2. Online softmax, as flash_forward_kernel's; the weights go to Ph in bfloat16.
    const float* srow = Ss + row * kLds + part * cols_per_part;
    float tile_max = attn::neg_inf<float>();
    for (int c = 0; c < cols_per_part; ++c) tile_max = srow[c] > tile_max ? srow[c] : tile_max;
    max_part[row * kParts + part] = tile_max;
    __syncthreads();
    tile_max = max_part[row * kParts];
    for (int p = 1; p < kParts; ++p) tile_max = max_part[row * kParts + p] > tile_max ? max_part[row * kParts + p] : tile_max;
    attn::SoftmaxState<float> st{m_s[row], l_s[row]};
    const float alpha = attn::softmax_rescale(st, tile_max);
    float sum = 0.0f;
    Bf16* prow = Ph + row * kLdp + part * cols_per_part;
    for (int c = 0; c < cols_per_part; ++c) {
      const float w = attn::softmax_weight(st, srow[c]);
      prow[c] = __float2bfloat16_rn(w);  // P V's operand; the sum is of the float32 weights
      sum += w;
    }
    sum_part[row * kParts + part] = sum;
    __syncthreads();
    if (part == 0) {
      float total = sum_part[row * kParts];
      for (int p = 1; p < kParts; ++p) total += sum_part[row * kParts + p];
      attn::softmax_add(st, total);
      m_s[row] = st.m;
      l_s[row] = st.l;
      alpha_s[row] = alpha;
    }
    // 3. P V on the tensor cores (Ph was written before the barrier above), then O = alpha O + P V.
    {
      WarpTiles<kRows, DMAX> pv;
      pv.zero();
      pv.template add_product<kCols>(Ph, kLdp, Vh, H);
      pv.store(PVs, LDO);
    }
    __syncthreads();
    for (int r = 0; r < RPT; ++r) {
      const int i = ty + kGrid * r;
      const float a = alpha_s[i];
      for (int o = 0; o < OPT; ++o) acc[r][o] = a * acc[r][o] + PVs[i * LDO + tx + kGrid * o];
    }
  }
  __syncthreads();  // m_s, l_s final (also when every tile was skipped)

  for (int r = 0; r < RPT; ++r) {
    const int i = ty + kGrid * r;
    if (q0 + i >= d.T) continue;
    const float norm = attn::softmax_norm(attn::SoftmaxState<float>{m_s[i], l_s[i]});
    S* o_row = out + (b * d.T + q0 + i) * d.D + h * d.Dh;
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dh) o_row[tx + kGrid * o] = S(acc[r][o] * norm);
  }
  if (tid < kRows && q0 + tid < d.T)
    lse[bh * d.T + q0 + tid] = double(attn::softmax_lse(attn::SoftmaxState<float>{m_s[tid], l_s[tid]}));
#endif
}

// ---- Backward, kernel 1 of 2: dQ and delta (D_i), as flash_backward_dq_kernel. Block (b, h, query tile).
// (DMAX 64 is held to 128 registers, 2 blocks per SM: left free, ptxas picked 80 and spilled.)
template <int DMAX, typename S>
__global__ void __launch_bounds__(kBlock, DMAX == 64 ? 2 : 1) backward_dq_kernel(const S* qkv, const bool* pad, Dims d, float scale,
                                                             const S* out, const S* dout, const double* lse,
                                                             double* delta, S* dqkv) {
#if EMBER_TC_KERNEL_BODY
  using L = BackwardLayout<DMAX>;
  constexpr int H = Strides<DMAX>::H, LDO = Strides<DMAX>::O;
  extern __shared__ double shared_mem[];
  unsigned char* base = aligned_shared(shared_mem);
  Bf16* Qh = reinterpret_cast<Bf16*>(base + L::a);
  Bf16* dOh = reinterpret_cast<Bf16*>(base + L::b);
  Bf16* Kh = reinterpret_cast<Bf16*>(base + L::c);
  Bf16* Vh = reinterpret_cast<Bf16*>(base + L::d);
  float* Ss = reinterpret_cast<float*>(base + L::s);
  float* dPs = reinterpret_cast<float*>(base + L::dp);
  Bf16* dSh = reinterpret_cast<Bf16*>(base + L::ds);
  float* lse_s = reinterpret_cast<float*>(base + L::stats);
  float* d_s = lse_s + kRows;
  float* d_part = d_s + kRows;
  int* kflag = reinterpret_cast<int*>(base + L::flags);
  float* dQs = Ss;  // [kRows][LDO], once the loop is done

  const int tid = threadIdx.x;
  const int64_t n_qt = (d.T + kRows - 1) / kRows;
  const int64_t qt = blockIdx.x % n_qt, bh = blockIdx.x / n_qt, h = bh % d.H, b = bh / d.H;
  const int64_t q0 = qt * kRows, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;
  const S* o_head = out + b * d.T * d.D + h * d.Dh;
  const S* do_head = dout + b * d.T * d.D + h * d.Dh;
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;

  load_rows_bf16<DMAX, kRows>(Qh, q, row_stride, q0, d);
  load_rows_bf16<DMAX, kRows>(dOh, do_head, d.D, q0, d);
  // D_i = dO_i . O_i from the unrounded dO, in flash_backward_dq_kernel's order (the same bits).
  {
    const int row = tid / kParts, part = tid % kParts;
    const int64_t i = q0 + row;
    float partial = 0.0f;
    if (i < d.T)
      for (int64_t c = part; c < d.Dh; c += kParts) partial += float(do_head[i * d.D + c]) * float(o_head[i * d.D + c]);
    d_part[row * kParts + part] = partial;
    __syncthreads();
    if (part == 0) {
      float total = d_part[row * kParts];
      for (int p = 1; p < kParts; ++p) total += d_part[row * kParts + p];
      d_s[row] = total;
      lse_s[row] = i < d.T ? float(lse[bh * d.T + i]) : 0.0f;
      if (i < d.T) delta[bh * d.T + i] = double(total);
    }
  }
  WarpTiles<kRows, DMAX> dq;
  dq.zero();

  const int64_t kt_end = key_tiles_for(d, q0, kRows, kCols);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * kCols;
    if (!any_key_live<kCols>(pad_row, k0, d.T) || !tile_in_band(d, q0, kRows, k0, kCols)) continue;
    __syncthreads();  // the previous tile is no longer read; d_s and lse_s written
    load_rows_bf16<DMAX, kCols>(Kh, q + d.D, row_stride, k0, d);
    load_rows_bf16<DMAX, kCols>(Vh, q + 2 * d.D, row_stride, k0, d);
    load_key_flags<kCols>(kflag, pad_row, k0, d.T);
    __syncthreads();
    product_abt<kRows, kCols, DMAX>(Ss, kLds, Qh, H, Kh, H);    // the forward's scores
    product_abt<kRows, kCols, DMAX>(dPs, kLds, dOh, H, Vh, H);  // dP = dO V^T
    __syncthreads();
    for (int idx = tid; idx < kRows * kCols; idx += kBlock) {
      const int i = idx / kCols, j = idx % kCols;
      const bool masked = q0 + i >= d.T || masked_at(d, kflag[j] != 0, q0 + i, k0 + j);
      const float p = attn::softmax_prob(masked, scale * Ss[i * kLds + j], lse_s[i]);
      dSh[i * kLdp + j] = __float2bfloat16_rn(attn::softmax_grad_score(p, dPs[i * kLds + j], d_s[i]));
    }
    __syncthreads();
    dq.template add_product<kCols>(dSh, kLdp, Kh, H);  // dQ += dS K
  }
  __syncthreads();  // Ss and dPs no longer read: dQs goes over them
  dq.store(dQs, LDO);
  __syncthreads();
  for (int idx = tid; idx < kRows * DMAX; idx += kBlock) {
    const int r = idx / DMAX, c = idx % DMAX;
    const int64_t i = q0 + r;
    if (i < d.T && c < d.Dh) dqkv[(b * d.T + i) * row_stride + h * d.Dh + c] = S(scale * dQs[r * LDO + c]);
  }
#endif
}

// ---- Backward, kernel 2 of 2: dK and dV, as flash_backward_dkv_kernel. Block (b, h, key tile); the
// rows of its tiles are keys, the columns query rows.
template <int DMAX, typename S>
__global__ void __launch_bounds__(kBlock) backward_dkv_kernel(const S* qkv, const bool* pad, Dims d, float scale,
                                                              const S* dout, const double* lse, const double* delta,
                                                              S* dqkv) {
#if EMBER_TC_KERNEL_BODY
  using L = BackwardLayout<DMAX>;
  constexpr int H = Strides<DMAX>::H, LDO = Strides<DMAX>::O;
  extern __shared__ double shared_mem[];
  unsigned char* base = aligned_shared(shared_mem);
  Bf16* Kh = reinterpret_cast<Bf16*>(base + L::a);
  Bf16* Vh = reinterpret_cast<Bf16*>(base + L::b);
  Bf16* Qh = reinterpret_cast<Bf16*>(base + L::c);
  Bf16* dOh = reinterpret_cast<Bf16*>(base + L::d);
  float* Ss = reinterpret_cast<float*>(base + L::s);    // S^T [keys][queries]
  float* dPs = reinterpret_cast<float*>(base + L::dp);  // dP^T
  Bf16* Ph = reinterpret_cast<Bf16*>(base + L::p);      // P^T
  Bf16* dSh = reinterpret_cast<Bf16*>(base + L::ds);    // dS^T
  float* lse_s = reinterpret_cast<float*>(base + L::stats);
  float* d_s = lse_s + kCols;
  int* kflag = reinterpret_cast<int*>(base + L::flags);
  float* outs = Ss;  // [kRows][LDO]: dK, then dV, once the loop is done

  const int tid = threadIdx.x;
  const int64_t n_kt = (d.T + kRows - 1) / kRows;
  const int64_t kt = blockIdx.x % n_kt, bh = blockIdx.x / n_kt, h = bh % d.H, b = bh / d.H;
  const int64_t k0 = kt * kRows, row_stride = 3 * d.D;
  const S* q = qkv + b * d.T * row_stride + h * d.Dh;
  const S* do_head = dout + b * d.T * d.D + h * d.Dh;
  const bool* pad_row = pad != nullptr ? pad + b * d.T : nullptr;

  load_rows_bf16<DMAX, kRows>(Kh, q + d.D, row_stride, k0, d);
  load_rows_bf16<DMAX, kRows>(Vh, q + 2 * d.D, row_stride, k0, d);
  load_key_flags<kRows>(kflag, pad_row, k0, d.T);
  WarpTiles<kRows, DMAX> dk, dv;
  dk.zero();
  dv.zero();

  const int64_t n_qt = any_key_live<kRows>(pad_row, k0, d.T) ? (d.T + kCols - 1) / kCols : 0;
  const int64_t qt_begin = d.causal ? k0 / kCols : 0;
  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int64_t i0 = qt * kCols;
    if (!tile_in_band(d, i0, kCols, k0, kRows)) continue;
    __syncthreads();  // the previous tile is no longer read (and Kh, Vh, kflag are loaded)
    load_rows_bf16<DMAX, kCols>(Qh, q, row_stride, i0, d);
    load_rows_bf16<DMAX, kCols>(dOh, do_head, d.D, i0, d);
    if (tid < kCols) {
      const int64_t i = i0 + tid;
      lse_s[tid] = i < d.T ? float(lse[bh * d.T + i]) : 0.0f;
      d_s[tid] = i < d.T ? float(delta[bh * d.T + i]) : 0.0f;
    }
    __syncthreads();
    product_abt<kRows, kCols, DMAX>(Ss, kLds, Kh, H, Qh, H);    // S^T = K Q^T
    product_abt<kRows, kCols, DMAX>(dPs, kLds, Vh, H, dOh, H);  // dP^T = V dO^T
    __syncthreads();
    for (int idx = tid; idx < kRows * kCols; idx += kBlock) {
      const int j = idx / kCols, i = idx % kCols;
      const bool masked = i0 + i >= d.T || masked_at(d, kflag[j] != 0, i0 + i, k0 + j);
      const float p = attn::softmax_prob(masked, scale * Ss[j * kLds + i], lse_s[i]);
      Ph[j * kLdp + i] = __float2bfloat16_rn(p);
      dSh[j * kLdp + i] = __float2bfloat16_rn(attn::softmax_grad_score(p, dPs[j * kLds + i], d_s[i]));
    }
    __syncthreads();
    dv.template add_product<kCols>(Ph, kLdp, dOh, H);  // dV += P^T dO
    dk.template add_product<kCols>(dSh, kLdp, Qh, H);  // dK += dS^T Q
  }
  // dK, then dV, each through the float tile over Ss and dPs.
  auto write = [&](const WarpTiles<kRows, DMAX>& tiles, int64_t column, float factor) {
    __syncthreads();  // Ss and dPs (or the previous output) no longer read
    tiles.store(outs, LDO);
    __syncthreads();
    for (int idx = tid; idx < kRows * DMAX; idx += kBlock) {
      const int r = idx / DMAX, c = idx % DMAX;
      const int64_t j = k0 + r;
      if (j < d.T && c < d.Dh) dqkv[(b * d.T + j) * row_stride + column + h * d.Dh + c] = S(factor * outs[r * LDO + c]);
    }
  };
  write(dk, d.D, scale);
  write(dv, 2 * d.D, 1.0f);
#endif
}

#undef EMBER_TC_KERNEL_BODY
#undef EMBER_UNROLL

}  // namespace tc

// ---- Host side.

// Calls fn(std::integral_constant<int, DMAX>{}) with the smallest DMAX of 16, 32, 64, 128 that holds Dh.
template <typename Fn>
void with_head_dim(int64_t Dh, Fn&& fn) {
  if (Dh <= 16)
    fn(std::integral_constant<int, 16>{});
  else if (Dh <= 32)
    fn(std::integral_constant<int, 32>{});
  else if (Dh <= 64)
    fn(std::integral_constant<int, 64>{});
  else if (Dh <= kMaxHeadDim)
    fn(std::integral_constant<int, 128>{});
  else {
    char message[200];
    std::snprintf(message, sizeof message,
                  "attention (CUDA, fused): head size %lld is larger than the fused kernels' %d; use the composed "
                  "attention (EMBER_ATTENTION=composed)",
                  static_cast<long long>(Dh), kMaxHeadDim);
    raise_message(message);
  }
}

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

void check_blocks(int64_t blocks) {
  if (blocks > 2147483647)
    raise_message("attention (CUDA, fused): more than 2^31 - 1 blocks of B * heads * tiles; use the composed attention");
}

Dims make_dims(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal, int64_t window, int64_t global,
               bool bf16 = false) {
  return {B, T, heads, D / heads, D, causal, window, global, bf16};
}

// T: the compute type; S: the tensors' (qkv, out), T itself or bfloat16 (read exactly, written rounded).
template <typename T, typename S = T>
void forward_typed(int device, const S* qkv, const bool* pad, const Dims& d, S* out, double* lse, T* probs) {
  cudaStream_t stream = use_device(device);
  const T scale = T(1) / std::sqrt(T(d.Dh));
  with_head_dim(d.Dh, [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    using C = Tiles<T, DMAX>;
    const int64_t blocks = d.B * d.H * ((d.T + C::BR - 1) / C::BR);
    check_blocks(blocks);
    const size_t shared = forward_shared<T, DMAX>();
    reserve_shared(flash_forward_kernel<T, DMAX, S>, shared, device, "flash_forward_kernel");
    flash_forward_kernel<T, DMAX, S><<<unsigned(blocks), kBlock, shared, stream>>>(qkv, pad, d, scale, out, lse);
    EMBER_CUDA_LAUNCHED("flash_forward_kernel");
    if (probs != nullptr) {
      const size_t shared_p = probs_shared<T, DMAX>();
      reserve_shared(flash_probs_kernel<T, DMAX, S>, shared_p, device, "flash_probs_kernel");
      flash_probs_kernel<T, DMAX, S><<<unsigned(blocks), kBlock, shared_p, stream>>>(qkv, pad, d, scale, lse, probs);
      EMBER_CUDA_LAUNCHED("flash_probs_kernel");
    }
  });
}

template <typename T, typename S = T>
void backward_typed(int device, const S* qkv, const bool* pad, const Dims& d, const S* out, const S* dout,
                    const double* lse, double* delta, S* dqkv) {
  cudaStream_t stream = use_device(device);
  const T scale = T(1) / std::sqrt(T(d.Dh));
  with_head_dim(d.Dh, [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    using C = Tiles<T, DMAX>;
    const int64_t q_blocks = d.B * d.H * ((d.T + C::BR - 1) / C::BR);
    const int64_t k_blocks = d.B * d.H * ((d.T + C::BK - 1) / C::BK);
    check_blocks(q_blocks > k_blocks ? q_blocks : k_blocks);
    const size_t shared_q = dq_shared<T, DMAX>(), shared_k = dkv_shared<T, DMAX>();
    reserve_shared(flash_backward_dq_kernel<T, DMAX, S>, shared_q, device, "flash_backward_dq_kernel");
    reserve_shared(flash_backward_dkv_kernel<T, DMAX, S>, shared_k, device, "flash_backward_dkv_kernel");
    // Kernel 1 writes delta, which kernel 2 reads: the stream runs them in this order.
    flash_backward_dq_kernel<T, DMAX, S>
        <<<unsigned(q_blocks), kBlock, shared_q, stream>>>(qkv, pad, d, scale, out, dout, lse, delta, dqkv);
    EMBER_CUDA_LAUNCHED("flash_backward_dq_kernel");
    flash_backward_dkv_kernel<T, DMAX, S>
        <<<unsigned(k_blocks), kBlock, shared_k, stream>>>(qkv, pad, d, scale, dout, lse, delta, dqkv);
    EMBER_CUDA_LAUNCHED("flash_backward_dkv_kernel");
  });
}

// The tensor-core kernels (tc:: above) for a bfloat16 attention: S the tensors' type, float32 or bfloat16.
template <typename S>
void forward_tensor_cores(int device, const S* qkv, const bool* pad, const Dims& d, S* out, double* lse) {
  cudaStream_t stream = use_device(device);
  const float scale = 1.0f / std::sqrt(float(d.Dh));
  with_head_dim(d.Dh, [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    const int64_t blocks = d.B * d.H * ((d.T + tc::kRows - 1) / tc::kRows);
    check_blocks(blocks);
    const size_t shared = tc::ForwardLayout<DMAX>::bytes;
    reserve_shared(tc::forward_kernel<DMAX, S>, shared, device, "tc::forward_kernel");
    tc::forward_kernel<DMAX, S><<<unsigned(blocks), kBlock, shared, stream>>>(qkv, pad, d, scale, out, lse);
    EMBER_CUDA_LAUNCHED("tc::forward_kernel");
  });
}

template <typename S>
void backward_tensor_cores(int device, const S* qkv, const bool* pad, const Dims& d, const S* out, const S* dout,
                           const double* lse, double* delta, S* dqkv) {
  cudaStream_t stream = use_device(device);
  const float scale = 1.0f / std::sqrt(float(d.Dh));
  with_head_dim(d.Dh, [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    const int64_t blocks = d.B * d.H * ((d.T + tc::kRows - 1) / tc::kRows);  // query tiles, then key tiles
    check_blocks(blocks);
    const size_t shared = tc::BackwardLayout<DMAX>::bytes;
    reserve_shared(tc::backward_dq_kernel<DMAX, S>, shared, device, "tc::backward_dq_kernel");
    reserve_shared(tc::backward_dkv_kernel<DMAX, S>, shared, device, "tc::backward_dkv_kernel");
    // Kernel 1 writes delta, which kernel 2 reads: the stream runs them in this order.
    tc::backward_dq_kernel<DMAX, S>
        <<<unsigned(blocks), kBlock, shared, stream>>>(qkv, pad, d, scale, out, dout, lse, delta, dqkv);
    EMBER_CUDA_LAUNCHED("tc::backward_dq_kernel");
    tc::backward_dkv_kernel<DMAX, S><<<unsigned(blocks), kBlock, shared, stream>>>(qkv, pad, d, scale, dout, lse, delta, dqkv);
    EMBER_CUDA_LAUNCHED("tc::backward_dkv_kernel");
  });
}

std::atomic<int> use_tensor_cores{-1};  // -1: not decided yet (read EMBER_ATTENTION_TENSOR_CORES on first use)

// Whether this device runs the bfloat16 attention on the tensor-core kernels: asked for (the default) and
// bfloat16 WMMA there (compute capability 8.0 or more).
bool tensor_cores_usable(int device) {
  if (!attention_tensor_cores()) return false;
  int major = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

std::atomic<int> use_fused{-1};  // -1: not decided yet (read EMBER_ATTENTION on first use)

}  // namespace

void set_attention_fused(bool on) { use_fused = on ? 1 : 0; }

bool attention_fused() {
  int value = use_fused.load();
  if (value < 0) {
    // Fused unless EMBER_ATTENTION=composed: on the H200 the fused step took 2.77 ms, the composed 3.58
    // (docs/results/gpu-h200-65c2eb4/), with every fused-kernel test green there.
    const char* env = std::getenv("EMBER_ATTENTION");
    value = env != nullptr && std::strcmp(env, "composed") == 0 ? 0 : 1;
    use_fused = value;
  }
  return value == 1;
}

int64_t attention_max_head_dim() { return kMaxHeadDim; }

void set_attention_tensor_cores(bool on) { use_tensor_cores = on ? 1 : 0; }

bool attention_tensor_cores() {
  int value = use_tensor_cores.load();
  if (value < 0) {
    const char* env = std::getenv("EMBER_ATTENTION_TENSOR_CORES");
    value = env != nullptr && (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0) ? 0 : 1;
    use_tensor_cores = value;
  }
  return value == 1;
}

namespace {

// Full attention is window < 0 (Dims): the same kernels, every tile in the band.
void forward_float(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                       int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, void* out, double* lse,
                       void* probs) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, window, global);
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    forward_typed(device, static_cast<const T*>(qkv), key_padding_mask, d, static_cast<T*>(out), lse,
                  static_cast<T*>(probs));
  });
}

void backward_float(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                        int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, const void* out,
                        const void* grad_out, const double* lse, double* delta, void* grad_qkv) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, window, global);
  dispatch_floating(float64, [&](auto tag) {
    using T = decltype(tag);
    backward_typed<T>(device, static_cast<const T*>(qkv), key_padding_mask, d, static_cast<const T*>(out),
                      static_cast<const T*>(grad_out), lse, delta, static_cast<T*>(grad_qkv));
  });
}

// Mixed precision: the same kernels with the products' operands rounded to bfloat16, computed in float;
// the tensors (qkv, out, grad_out, grad_qkv) float32 or, with dtype kBFloat16, bfloat16 (read exactly,
// each result rounded once as it is stored); the weights asked for (probs) float32 either way. The band
// reaches the tensor-core kernels (tc::) and the CUDA-core ones alike through Dims.
void forward_bf16(int device, int dtype, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                            int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, void* out,
                            double* lse, float* probs) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, window, global, true);
  if (probs == nullptr && tensor_cores_usable(device)) {  // the weights, when asked for, come from flash_probs_kernel
    dispatch_bf16_or_float(dtype, [&](auto tag) {
      using S = decltype(tag);
      forward_tensor_cores(device, static_cast<const S*>(qkv), key_padding_mask, d, static_cast<S*>(out), lse);
    });
    return;
  }
  dispatch_bf16_or_float(dtype, [&](auto tag) {
    using S = decltype(tag);
    forward_typed<float, S>(device, static_cast<const S*>(qkv), key_padding_mask, d, static_cast<S*>(out), lse, probs);
  });
}

void backward_bf16(int device, int dtype, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                             int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, const void* out,
                             const void* grad_out, const double* lse, double* delta, void* grad_qkv) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, window, global, true);
  if (tensor_cores_usable(device)) {
    dispatch_bf16_or_float(dtype, [&](auto tag) {
      using S = decltype(tag);
      backward_tensor_cores(device, static_cast<const S*>(qkv), key_padding_mask, d, static_cast<const S*>(out),
                            static_cast<const S*>(grad_out), lse, delta, static_cast<S*>(grad_qkv));
    });
    return;
  }
  dispatch_bf16_or_float(dtype, [&](auto tag) {
    using S = decltype(tag);
    backward_typed<float, S>(device, static_cast<const S*>(qkv), key_padding_mask, d, static_cast<const S*>(out),
                             static_cast<const S*>(grad_out), lse, delta, static_cast<S*>(grad_qkv));
  });
}

// The old host wrapper's check (the op never asks: attention_plan sends a larger head to the composed version).
void check_head_size(int64_t D, int64_t heads, int64_t window) {
  if (D % heads == 0 && D / heads <= kMaxHeadDim) return;
  char message[200];
  std::snprintf(message, sizeof message,
                "%s: head size %lld exceeds the fused CUDA kernels' %d (use EMBER_ATTENTION=composed)",
                window >= 0 ? "window_attention" : "attention", static_cast<long long>(heads > 0 ? D / heads : 0),
                kMaxHeadDim);
  raise_message(message);
}

// Mixed precision: a bfloat16 qkv, or bf16 with a float32 one.
bool mixed(const On& on, bool bf16) { return on.dtype == kBFloat16 || (bf16 && on.dtype == kFloat32); }

}  // namespace

// The GPU keeps out and the float64 log-sum-exps, and recomputes the probabilities in the backward; delta
// [B, H, T] is its scratch. The weights asked for are qkv's dtype (float32 for bfloat16).
AttentionPlan attention_plan(const On& on, int64_t B, int64_t T, int64_t heads, int64_t D, int64_t /*window*/,
                             bool /*bf16*/) {
  AttentionPlan plan;
  plan.fused = attention_fused() && D / heads <= attention_max_head_dim();
  plan.probs_dtype = on.dtype == kBFloat16 ? kFloat32 : on.dtype;
  plan.stats_dtype = kFloat64;
  plan.scratch = B * heads * T;
  return plan;
}

void attention_forward(const On& on, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                       int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, bool bf16, void* out,
                       void* stats, void* probs) {
  check_head_size(D, heads, window);
  if (mixed(on, bf16))
    forward_bf16(on.device, on.dtype, qkv, key_padding_mask, B, T, heads, D, causal, window, global, out,
                 static_cast<double*>(stats), static_cast<float*>(probs));
  else
    forward_float(on.device, on.float64(), qkv, key_padding_mask, B, T, heads, D, causal, window, global, out,
                  static_cast<double*>(stats), probs);
}

void attention_probs(const On&, const void*, const bool*, int64_t, int64_t, int64_t, int64_t, bool, bool, const void*,
                     void*) {
  raise_message("attention_probs: the GPU's attention keeps no probabilities for its backward (attention_plan)");
}

void attention_backward(const On& on, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                        int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, bool bf16,
                        const void* out, const void* stats, const void* /*probs*/, const void* grad_out,
                        double* scratch, void* grad_qkv) {
  if (mixed(on, bf16))
    backward_bf16(on.device, on.dtype, qkv, key_padding_mask, B, T, heads, D, causal, window, global, out, grad_out,
                  static_cast<const double*>(stats), scratch, grad_qkv);
  else
    backward_float(on.device, on.float64(), qkv, key_padding_mask, B, T, heads, D, causal, window, global, out,
                   grad_out, static_cast<const double*>(stats), scratch, grad_qkv);
}

}  // namespace ember::cuda
