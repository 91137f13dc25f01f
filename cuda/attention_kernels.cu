// Fused multi-head self-attention on the GPU, tiled like FlashAttention-2 (Dao 2023): forward and
// backward without ever writing the [B, H, T, T] scores or probabilities to GPU memory.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
//
// Layout (as core/cpu/attention.h): qkv [B, T, 3 D] (row t: q, then k, then v, each H heads of Dh
// columns side by side), out [B, T, D], key_padding_mask bool [B, T] (true = padding), causal
// hides key j > query i. lse and delta are float64 [B, H, T]. Head h of q is the [T, Dh] block at
// column h * Dh with row stride 3 D: the kernels read it in place, no permute or copy.
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
// double. Mixed precision (attention_forward_bf16 / attention_backward_bf16): the operands of every
// product (Q, K, V, dO as they are staged, P and dS as they are written to shared memory) are rounded to
// bfloat16, the products summed in float; the scores, the online softmax, lse and D = dO . O stay float32
// (D from the unrounded dO), as a bf16 tensor-core kernel computes. Its tensors (qkv, O, dO, dqkv) are
// float32, or bfloat16 (S = BFloat16: read exactly, each result rounded once as it is stored). Plain CUDA only (no warp shuffles, no tensor-core instructions, no atomics), so that a
// CPU emulator of CUDA can run it; the arithmetic is on the CUDA cores.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>

#include "core/bfloat16.h"
#include "core/cuda_ops.h"
#include "core/online_softmax.h"
#include "cuda/launch.h"

namespace ember::cuda {
namespace {

constexpr int kBlock = 256;     // threads per block, a 16 x 16 grid
constexpr int kGrid = 16;       // its side
constexpr int kMaxHeadDim = 128;

struct Dims {
  int64_t B, T, H, Dh, D;
  bool causal;
  int64_t window = -1, global = 0;  // sliding-window attention (window_attention); window < 0: full
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
// Shared: Qs [BR][DMAX+1], Ks [BC][DMAX+1], kflag [BC].
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

Dims make_dims(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal, int64_t window = -1, int64_t global = 0,
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

std::atomic<int> use_fused{-1};  // -1: not decided yet (read EMBER_ATTENTION on first use)

}  // namespace

void set_attention_fused(bool on) { use_fused = on ? 1 : 0; }

bool attention_fused() {
  int value = use_fused.load();
  if (value < 0) {
    const char* env = std::getenv("EMBER_ATTENTION");
    value = env != nullptr && std::strcmp(env, "fused") == 0 ? 1 : 0;
    use_fused = value;
  }
  return value == 1;
}

int64_t attention_max_head_dim() { return kMaxHeadDim; }

void window_attention_forward(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B,
                              int64_t T, int64_t heads, int64_t D, bool causal, int64_t window, int64_t global, void* out,
                              double* lse, void* probs) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, window, global);
  if (float64)
    forward_typed(device, static_cast<const double*>(qkv), key_padding_mask, d, static_cast<double*>(out), lse,
                  static_cast<double*>(probs));
  else
    forward_typed(device, static_cast<const float*>(qkv), key_padding_mask, d, static_cast<float*>(out), lse,
                  static_cast<float*>(probs));
}

void window_attention_backward(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B,
                               int64_t T, int64_t heads, int64_t D, bool causal, int64_t window, int64_t global,
                               const void* out, const void* grad_out, const double* lse, double* delta,
                               void* grad_qkv) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, window, global);
  if (float64)
    backward_typed<double>(device, static_cast<const double*>(qkv), key_padding_mask, d, static_cast<const double*>(out),
                           static_cast<const double*>(grad_out), lse, delta, static_cast<double*>(grad_qkv));
  else
    backward_typed<float>(device, static_cast<const float*>(qkv), key_padding_mask, d, static_cast<const float*>(out),
                          static_cast<const float*>(grad_out), lse, delta, static_cast<float*>(grad_qkv));
}

// attention(): the same kernels without a band.
void attention_forward(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                       int64_t heads, int64_t D, bool causal, void* out, double* lse, void* probs) {
  window_attention_forward(device, float64, qkv, key_padding_mask, B, T, heads, D, causal, -1, 0, out, lse, probs);
}

void attention_backward(int device, bool float64, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                        int64_t heads, int64_t D, bool causal, const void* out, const void* grad_out, const double* lse,
                        double* delta, void* grad_qkv) {
  window_attention_backward(device, float64, qkv, key_padding_mask, B, T, heads, D, causal, -1, 0, out, grad_out, lse,
                            delta, grad_qkv);
}

// Mixed precision: the same kernels with the products' operands rounded to bfloat16, computed in float;
// the tensors (qkv, out, grad_out, grad_qkv) float32 or, with dtype kBFloat16, bfloat16 (read exactly,
// each result rounded once as it is stored); the weights asked for (probs) float32 either way.
void attention_forward_bf16(int device, int dtype, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                            int64_t heads, int64_t D, bool causal, void* out, double* lse, float* probs) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, -1, 0, true);
  if (dtype == kBFloat16)
    forward_typed<float, BFloat16>(device, static_cast<const BFloat16*>(qkv), key_padding_mask, d,
                                   static_cast<BFloat16*>(out), lse, probs);
  else
    forward_typed<float>(device, static_cast<const float*>(qkv), key_padding_mask, d, static_cast<float*>(out), lse,
                         probs);
}

void attention_backward_bf16(int device, int dtype, const void* qkv, const bool* key_padding_mask, int64_t B, int64_t T,
                             int64_t heads, int64_t D, bool causal, const void* out, const void* grad_out,
                             const double* lse, double* delta, void* grad_qkv) {
  if (B * heads * T == 0) return;
  const Dims d = make_dims(B, T, heads, D, causal, -1, 0, true);
  if (dtype == kBFloat16)
    backward_typed<float, BFloat16>(device, static_cast<const BFloat16*>(qkv), key_padding_mask, d,
                                    static_cast<const BFloat16*>(out), static_cast<const BFloat16*>(grad_out), lse,
                                    delta, static_cast<BFloat16*>(grad_qkv));
  else
    backward_typed<float>(device, static_cast<const float*>(qkv), key_padding_mask, d, static_cast<const float*>(out),
                          static_cast<const float*>(grad_out), lse, delta, static_cast<float*>(grad_qkv));
}

}  // namespace ember::cuda
