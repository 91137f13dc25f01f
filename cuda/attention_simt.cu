// Fused scaled dot-product attention on the CUDA cores, tiled like FlashAttention-2 (Dao 2023): forward and
// backward without ever writing the [B, H, T, S] scores or probabilities to GPU memory. The operands, masks
// and shared building blocks: cuda/attention_tiles.cuh; the tensor-core kernels for mixed precision:
// cuda/attention_tensor_cores.cu; the entry points of core/kernels.h: cuda/attention_kernels.cu.
//
// What it saves. The composed version (scaled_dot_product_attention_reference: cuBLAS GEMMs + masked_fill +
// softmax) writes the scores, the masked scores and the probabilities, each [B, H, T, S] (32 MiB apiece in
// float32 for the IMDb recipe's B = 32, T = S = 256, H = 4), reads them back, keeps the probabilities for
// the backward and makes their gradients there: hundreds of MiB of memory traffic per layer, and the memory
// to hold it. Here each block keeps a [Br, Bc] tile of scores in shared memory (a few KiB), and the backward
// recomputes it from Q, K and the saved log-sum-exp: 7 products of the size of Q K^T in the backward instead
// of the composed version's 4 (S and dP are recomputed in each of its two kernels), for traffic of the order
// of Q, K, V, O and dO ([B, T, D] each, 4 MiB) times the number of tiles.
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
// double. Mixed precision (bf16, or bfloat16 operands): the operands of every product (Q, K, V, dO as they
// are staged, P and dS as they are written to shared memory) are rounded to bfloat16, the products summed in
// float; the scores, the online softmax, lse and D = dO . O stay float32 (D from the unrounded dO). Its
// tensors are float32, or bfloat16 (S = BFloat16: read exactly, each result rounded once as it is stored).
// These kernels are plain CUDA (no warp shuffles, no tensor-core instructions, no atomics); mixed precision
// runs by default on the tensor-core kernels, the same algorithm and roundings.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/kernels.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/dispatch.h"

namespace ember::cuda::attention {
namespace {

// Tile sizes for an element type and DMAX, the head size rounded up to 16, 32, 64 or 128 (the
// columns from Dh (Dv) to DMAX are zero in shared memory, so every loop runs to the constant DMAX).
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

// The key tile of (b, h) starting at key k0 into shared memory: its K rows, its V rows, its flags.
template <typename T, int DMAX, int ROWS, typename S>
__device__ __forceinline__ void load_key_tile(T* Ks, T* Vs, int* kflag, const Args& a, int64_t b, int64_t h,
                                              int64_t k0) {
  const Dims& d = a.d;
  load_rows<T, DMAX, ROWS, DMAX + 1>(Ks, a.k.at<const S>(b, h, 0), a.k.row, k0, d.S, d.Dh, d.bf16);
  load_rows<T, DMAX, ROWS, DMAX + 1>(Vs, a.v.at<const S>(b, h, 0), a.v.row, k0, d.S, d.Dv, d.bf16);
  load_key_flags<ROWS>(kflag, a, b, h, k0);
}

// ---- Forward. Block (b, h, query tile qt): blockIdx.x = (b * H + h) * n_query_tiles + qt.
// Shared memory (T = float or double):
//   Qs [BR][DMAX+1]   the block's queries, loaded once
//   Ks [BC][DMAX+1]   the current key tile
//   Vs [BC][DMAX+1]   the current value tile
//   Ss [BR][BC+1]     the score tile, then (in place) its unnormalised weights e^(s - m)
//   m_s, l_s, alpha_s [BR]: each row's online-softmax state and this tile's rescale factor
//   max_part, sum_part [BR][parts]: each row's partial max / sum, one per thread of the row
//   kflag [BC] (int)  1 = key masked for every query (padding or past S)
// The softmax of a row is done by parts = 256 / BR threads (4 in float32), each over BC / parts
// columns; their partial results are combined in a fixed order.
template <typename T, int DMAX, typename S = T>
__global__ void flash_forward_kernel(const __grid_constant__ Args a, T scale) {
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

  const Dims& d = a.d;
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const int row = tid / parts, part = tid % parts;  // this thread's share of the softmax
  const auto [bh, b, h, q0] = block_tile(d, d.T, BR);

  load_rows<T, DMAX, BR, LD>(Qs, a.q.at<const S>(b, h, 0), a.q.row, q0, d.T, d.Dh, d.bf16);
  start_rows<T, BR>(m_s, l_s);
  T acc[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) acc[r][o] = T(0);

  const int64_t kt_end = key_tiles_for(d, q0, BR, BC);
  for (int64_t kt = 0; kt < kt_end; ++kt) {
    const int64_t k0 = kt * BC;
    if (!key_tile_seen<BC>(a, b, h, q0, BR, k0)) continue;  // all padding, or outside the window
    __syncthreads();  // the previous tile's Ks, Vs, Ss and kflag are no longer read (and Qs is loaded)
    load_key_tile<T, DMAX, BC, S>(Ks, Vs, kflag, a, b, h, k0);
    __syncthreads();

    // 1. Scores: S = scale Q K^T, masked.
    T s[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Qs, Ks, ty, tx);
    for (int r = 0; r < RPT; ++r)
      for (int c = 0; c < CPT; ++c) {
        const int i = ty + kGrid * r, j = tx + kGrid * c;
        Ss[i * SLD + j] = masked_score<T, S>(a, kflag[j] != 0, b, h, q0 + i, k0 + j, scale * s[r][c]);
      }
    __syncthreads();

    // 2. Online softmax, row `row` split over `parts` threads: the weights e^(s - m) over the scores.
    T* srow = Ss + row * SLD + part * cols_per_part;
    online_softmax_step<T, parts>(srow, cols_per_part, row, part, max_part, sum_part, m_s, l_s, alpha_s,
                                  [&](int c, T w) { srow[c] = bf16_if(d.bf16, w); });
    __syncthreads();

    // 3. O = alpha O + P V, in registers.
    for (int r = 0; r < RPT; ++r) {
      const T alpha = alpha_s[ty + kGrid * r];
      for (int o = 0; o < OPT; ++o) acc[r][o] *= alpha;
    }
    tile_accumulate<T, DMAX, RPT, BC>(acc, Ss, SLD, Vs, ty, tx);
  }
  __syncthreads();  // m_s, l_s final (also when every tile was skipped)
  write_output<T, S, BR>(a, bh, b, h, q0, acc, m_s, l_s);  // O = acc / l (0 for a row with no unmasked key), lse
}

// ---- The attention weights, when asked for: probs[b, h, i, j] = e^(s_ij - lse_i), every key
// tile (masked entries are written as 0, so every entry of a row with no unmasked key is 0, like the CPU).
// Shared: Qs [BR][DMAX+1], Ks [BC][DMAX+1], kflag [BC]. One block per BR-row query tile of one (batch,
// head), as flash_forward_kernel: its 16 x 16 threads each write RPT x CPT entries of every key tile.
template <typename T, int DMAX, typename S = T>
__global__ void flash_probs_kernel(const __grid_constant__ Args a, T scale, T* probs) {
  using C = Tiles<T, DMAX>;
  constexpr int BR = C::BR, BC = C::BC, LD = C::LD, RPT = BR / kGrid, CPT = BC / kGrid;
  extern __shared__ double shared_mem[];
  T* Qs = reinterpret_cast<T*>(shared_mem);
  T* Ks = Qs + BR * LD;
  int* kflag = reinterpret_cast<int*>(Ks + BC * LD);
  const Dims& d = a.d;
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const auto [bh, b, h, q0] = block_tile(d, d.T, BR);
  load_rows<T, DMAX, BR, LD>(Qs, a.q.at<const S>(b, h, 0), a.q.row, q0, d.T, d.Dh);
  T row_lse[RPT];
  for (int r = 0; r < RPT; ++r) {
    const int64_t i = q0 + ty + kGrid * r;
    row_lse[r] = i < d.T ? T(a.lse[bh * d.T + i]) : T(0);
  }
  const int64_t n_kt = (d.S + BC - 1) / BC;
  for (int64_t kt = 0; kt < n_kt; ++kt) {
    const int64_t k0 = kt * BC;
    __syncthreads();
    load_rows<T, DMAX, BC, LD>(Ks, a.k.at<const S>(b, h, 0), a.k.row, k0, d.S, d.Dh);
    load_key_flags<BC>(kflag, a, b, h, k0);
    __syncthreads();
    T s[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Qs, Ks, ty, tx);
    for (int r = 0; r < RPT; ++r) {
      const int64_t i = q0 + ty + kGrid * r;
      if (i >= d.T) continue;
      for (int c = 0; c < CPT; ++c) {
        const int64_t j = k0 + tx + kGrid * c;
        if (j >= d.S) continue;
        const T score = masked_score<T, S>(a, kflag[tx + kGrid * c] != 0, b, h, i, j, scale * s[r][c]);
        probs[(bh * d.T + i) * d.S + j] = prob_of(score, row_lse[r]);
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
__global__ void flash_backward_dq_kernel(const __grid_constant__ Args a, T scale) {
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

  const Dims& d = a.d;
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const auto [bh, b, h, q0] = block_tile(d, d.T, BR);

  load_rows<T, DMAX, BR, LD>(Qs, a.q.at<const S>(b, h, 0), a.q.row, q0, d.T, d.Dh, d.bf16);
  load_rows<T, DMAX, BR, LD>(dOs, a.dout.at<const S>(b, h, 0), a.dout.row, q0, d.T, d.Dv);  // rounded after D
  __syncthreads();
  row_deltas<T, S, BR, parts>(a, bh, b, h, q0, dOs, LD, d_part, d_s, lse_s);
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
    if (!key_tile_seen<BC>(a, b, h, q0, BR, k0)) continue;
    __syncthreads();  // previous tile done; d_s and lse_s written
    load_key_tile<T, DMAX, BC, S>(Ks, Vs, kflag, a, b, h, k0);
    __syncthreads();
    T s[RPT][CPT], dp[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Qs, Ks, ty, tx);    // the forward's scores, bit for bit
    tile_dot<T, DMAX, RPT, CPT>(dp, dOs, Vs, ty, tx);  // dP = dO V^T
    for (int r = 0; r < RPT; ++r)
      for (int c = 0; c < CPT; ++c) {
        const int i = ty + kGrid * r, j = tx + kGrid * c;
        const T score = q0 + i >= d.T ? attn::neg_inf<T>()
                                      : masked_score<T, S>(a, kflag[j] != 0, b, h, q0 + i, k0 + j, scale * s[r][c]);
        const T p = prob_of(score, lse_s[i]);
        dSs[i * SLD + j] = bf16_if(d.bf16, attn::softmax_grad_score(p, dp[r][c], d_s[i]));
      }
    __syncthreads();
    tile_accumulate<T, DMAX, RPT, BC>(acc, dSs, SLD, Ks, ty, tx);  // dQ += dS K
  }
  for (int r = 0; r < RPT; ++r) {
    const int64_t i = q0 + ty + kGrid * r;
    if (i >= d.T) continue;
    S* dq = a.dq.at<S>(b, h, i);
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
__global__ void flash_backward_dkv_kernel(const __grid_constant__ Args a, T scale) {
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

  const Dims& d = a.d;
  const int tid = threadIdx.x, ty = tid / kGrid, tx = tid % kGrid;
  const auto [bh, b, h, k0] = block_tile(d, d.S, BK);

  load_key_tile<T, DMAX, BK, S>(Ks, Vs, kflag, a, b, h, k0);
  T dk[RPT][OPT], dv[RPT][OPT];
  for (int r = 0; r < RPT; ++r)
    for (int o = 0; o < OPT; ++o) dk[r][o] = dv[r][o] = T(0);

  // No query sees a key tile that is all padding: its dK and dV are 0, and the loop is skipped.
  const int64_t n_qt = any_key_live<BK>(a, b, h, k0) ? (d.T + BQ - 1) / BQ : 0;
  const int64_t qt_begin = d.causal ? k0 / BQ : 0;  // causal: rows before k0 see none of these keys
  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int64_t i0 = qt * BQ;
    if (!tile_in_band(d, i0, BQ, k0, BK)) continue;  // no query of the tile sees these keys
    __syncthreads();  // the previous tile is no longer read (and Ks, Vs, kflag are loaded)
    load_rows<T, DMAX, BQ, LD>(Qs, a.q.at<const S>(b, h, 0), a.q.row, i0, d.T, d.Dh, d.bf16);
    load_rows<T, DMAX, BQ, LD>(dOs, a.dout.at<const S>(b, h, 0), a.dout.row, i0, d.T, d.Dv, d.bf16);
    load_row_stats<T, BQ>(a, bh, i0, lse_s, d_s);
    __syncthreads();
    T s[RPT][CPT], dp[RPT][CPT];
    tile_dot<T, DMAX, RPT, CPT>(s, Ks, Qs, ty, tx);    // S^T: the same products as the forward's S
    tile_dot<T, DMAX, RPT, CPT>(dp, Vs, dOs, ty, tx);  // dP^T = V dO^T
    EMBER_UNROLL
    for (int r = 0; r < RPT; ++r)
      EMBER_UNROLL
      for (int c = 0; c < CPT; ++c) {
        const int j = ty + kGrid * r, i = tx + kGrid * c;
        const T score = i0 + i >= d.T ? attn::neg_inf<T>()
                                      : masked_score<T, S>(a, kflag[j] != 0, b, h, i0 + i, k0 + j, scale * s[r][c]);
        const T p = prob_of(score, lse_s[i]);
        Ps[j * PLD + i] = bf16_if(d.bf16, p);
        dSs[j * PLD + i] = bf16_if(d.bf16, attn::softmax_grad_score(p, dp[r][c], d_s[i]));
      }
    __syncthreads();
    tile_accumulate<T, DMAX, RPT, BQ>(dv, Ps, PLD, dOs, ty, tx);  // dV += P^T dO
    tile_accumulate<T, DMAX, RPT, BQ>(dk, dSs, PLD, Qs, ty, tx);  // dK += dS^T Q
  }
  for (int r = 0; r < RPT; ++r) {
    const int64_t j = k0 + ty + kGrid * r;
    if (j >= d.S) continue;
    S* dk_row = a.dk.at<S>(b, h, j);
    S* dv_row = a.dv.at<S>(b, h, j);
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dh) dk_row[tx + kGrid * o] = S(scale * dk[r][o]);
    for (int o = 0; o < OPT; ++o)
      if (tx + kGrid * o < d.Dv) dv_row[tx + kGrid * o] = S(dv[r][o]);
  }
}

// T: the compute type; S: the tensors', T itself or bfloat16 (read exactly, written rounded).
template <typename T, typename S = T>
void forward_typed(int device, const Args& a, T* probs) {
  cudaStream_t stream = use_device(device);
  const T scale = attention_scale<T>(a.d);
  with_head_dim(head_size(a.d), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    using C = Tiles<T, DMAX>;
    const int64_t blocks = a.d.B * a.d.H * ((a.d.T + C::BR - 1) / C::BR);
    check_blocks(blocks);
    const size_t shared = forward_shared<T, DMAX>();
    reserve_shared(flash_forward_kernel<T, DMAX, S>, shared, device, "flash_forward_kernel");
    flash_forward_kernel<T, DMAX, S><<<unsigned(blocks), kBlock, shared, stream>>>(a, scale);
    EMBER_CUDA_LAUNCHED("flash_forward_kernel");
    if (probs != nullptr) {
      const size_t shared_p = probs_shared<T, DMAX>();
      reserve_shared(flash_probs_kernel<T, DMAX, S>, shared_p, device, "flash_probs_kernel");
      flash_probs_kernel<T, DMAX, S><<<unsigned(blocks), kBlock, shared_p, stream>>>(a, scale, probs);
      EMBER_CUDA_LAUNCHED("flash_probs_kernel");
    }
  });
}

template <typename T, typename S = T>
void backward_typed(int device, const Args& a) {
  cudaStream_t stream = use_device(device);
  const T scale = attention_scale<T>(a.d);
  with_head_dim(head_size(a.d), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value;
    using C = Tiles<T, DMAX>;
    const int64_t q_blocks = a.d.B * a.d.H * ((a.d.T + C::BR - 1) / C::BR);
    const int64_t k_blocks = a.d.B * a.d.H * ((a.d.S + C::BK - 1) / C::BK);
    check_blocks(q_blocks > k_blocks ? q_blocks : k_blocks);
    const size_t shared_q = dq_shared<T, DMAX>(), shared_k = dkv_shared<T, DMAX>();
    reserve_shared(flash_backward_dq_kernel<T, DMAX, S>, shared_q, device, "flash_backward_dq_kernel");
    reserve_shared(flash_backward_dkv_kernel<T, DMAX, S>, shared_k, device, "flash_backward_dkv_kernel");
    // Kernel 1 writes delta, which kernel 2 reads: the stream runs them in this order.
    flash_backward_dq_kernel<T, DMAX, S><<<unsigned(q_blocks), kBlock, shared_q, stream>>>(a, scale);
    EMBER_CUDA_LAUNCHED("flash_backward_dq_kernel");
    flash_backward_dkv_kernel<T, DMAX, S><<<unsigned(k_blocks), kBlock, shared_k, stream>>>(a, scale);
    EMBER_CUDA_LAUNCHED("flash_backward_dkv_kernel");
  });
}

}  // namespace

// Mixed precision (a.d.bf16, or bfloat16 operands) computes in float32 on the operands' type.
void simt_forward(int device, int dtype, const Args& a, void* probs) {
  if (a.d.bf16 || dtype == kBFloat16) {
    dispatch_bf16_or_float(dtype, [&](auto tag) { forward_typed<float, decltype(tag)>(device, a, static_cast<float*>(probs)); });
    return;
  }
  dispatch_floating(dtype == kFloat64, [&](auto tag) {
    using T = decltype(tag);
    forward_typed<T>(device, a, static_cast<T*>(probs));
  });
}

void simt_backward(int device, int dtype, const Args& a) {
  if (a.d.bf16 || dtype == kBFloat16) {
    dispatch_bf16_or_float(dtype, [&](auto tag) { backward_typed<float, decltype(tag)>(device, a); });
    return;
  }
  dispatch_floating(dtype == kFloat64, [&](auto tag) { backward_typed<decltype(tag)>(device, a); });
}

}  // namespace ember::cuda::attention
