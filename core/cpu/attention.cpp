// CPU multi-head self-attention, fused per (batch, head), one kernel family for full attention and for
// attention over a band (sliding-window attention, core/attention_band.h). The composed, readable version
// is attention_reference() in core/ops/attention.cpp; the tests compare the two.
//
// Layout: qkv is the fused projection [B, T, 3 * D], D = H * Dh: row t holds q (heads side by
// side), then k, then v. Head h of q is the [T, Dh] strided block at column h * Dh; the GEMMs read
// these blocks in place (row stride 3 D), so no permute or copy is needed, and the output and the
// gradient are written straight into the [B, T, D] and [B, T, 3 D] layouts (attention_layout.h).
// Each (b, h) is one task on one thread, every sum in a fixed order: results do not depend on the
// thread count. Keys after a review's last real token (trailing padding) get probability 0 from
// every query, so the products stop there: a batch padded to T costs each review its own length.
//
// Full attention (no band): the scores, their masks, the softmax and the product with V are computed
// for one head at a time, so that its [T, T] block stays in cache and the [B, H, T, T] intermediates
// of the composed version (scores, masked scores, probabilities, and their gradients) are never
// written out; the probabilities are kept for the backward.
// Forward per (b, h):   P = softmax(scale Q K^T + mask)   O = P V
// Backward per (b, h):  dV = P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dP * P))
//                       dQ = scale dS K   dK = scale dS^T Q
//
// With a band: cost and memory grow with T x window, not T^2, and nothing [T, T] is kept. Per (b, h),
// queries go in blocks of R rows [i0, i1); the keys a block can see are two ranges: the global keys
// below its window [0, a) and its window [lo, hi) = [i0 - W, i1 - 1 + W] (clipped), so a block's scores
// are an [R, a + hi - lo] tile, made by two GEMMs and masked to the exact band; global queries
// (i < global) are blocks whose one range is every key [0, L).
// Forward per block:   S = scale Q K^T (masked)   P = softmax(S)   O = P V   lse = log sum_j e^S (per row)
// Backward per block:  P = e^(S - lse), S recomputed (nothing [T, T] is saved)
//                      dV += P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dO * O))
//                      dQ = scale dS K   dK += scale dS^T Q
// (rowsum(dP * P) = rowsum(dO * O) since O = P V: Dh terms per row instead of a row of the band.)
// Saved for backward: the output and the [B, H, T] log-sum-exps (with qkv and the mask).
//
// The kernels of core/kernels.h (attention_plan, attention_forward, attention_probs, attention_backward).
// A query row whose keys are all masked gets probability 0 on every key: its output row is 0, and no
// gradient flows through it (docs/attention.md).
// Full attention keeps for the backward (attention_plan): the probabilities [B, H, T, T] of qkv's dtype,
// bfloat16 when bf16, and for a bfloat16 qkv bfloat16 pair-major [B, H, ceil(T / 2), T, 2] (below); and, when
// asked (stats not null: what a checkpoint keeps, autograd/recompute_cache.h), each row's softmax max and
// 1 / sum [B, H, T, 2] (float32 for a bfloat16 qkv), from which attention_probs rebuilds the same
// probabilities without the forward's other passes. A band keeps out and the rows' log-sum-exps [B, H, T]
// of qkv's dtype (-inf for a query that sees no key); its probabilities, when asked for, are the dense
// [B, H, T, T] weights (0 outside the band; O(T^2): for looking at, not for training).
// bf16 (float32 qkv only): Q K^T and P V (and the backward's four products) take bfloat16 operands and
// sum in float32 (cpu::gemm_bf16); the scores and the softmax are float32, and P V reads that float32 P
// (rounded while packed). The probabilities kept for the backward are rounded to bfloat16: P V rounds
// them so anyway, and the [B, H, T, T] tensor, the step's largest, then costs half the memory and
// half the traffic. The backward widens each head's block to float32 in cache; dS = P (dP - ...) then
// sees P rounded to bfloat16 (relative error <= 2^-9 per element).
// bfloat16 qkv: the same with bfloat16 products throughout (the scores, the softmax and dS in float32),
// a bfloat16 output and gradient, and the probabilities kept as bfloat16, pair-major: rows 2q and 2q + 1 of
// each head's block side by side, so that dV = P^T dO reads P^T in place, unpacked (gemm_bf16_pair_major).
// With a band: the products' operands rounded the same way when bf16 (the softmax, dS and rowsum(dO O) stay
// float32); a bfloat16 qkv is not taken (attention_plan: the op widens it to float32 first).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/attention_band.h"
#include "core/bfloat16.h"
#include "core/dtype.h"
#include "core/cpu/attention_layout.h"
#include "core/cpu/gemm.h"
#include "core/cpu/lanes.h"
#include "core/cpu/rows.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

using namespace attention_layout;

// [T, T] scratch blocks per thread (full attention, slot 0: the probabilities when they are not kept as T,
// and dS; slot 1: the backward's float32 copy of a head's bfloat16 probabilities. A band's block kernels,
// slot 0: a block's P; slot 1: its dS).
template <typename T, int kSlot = 0>
T* scratch(int64_t count) {
  thread_local std::vector<T> buffer;
  if (int64_t(buffer.size()) < count) buffer.resize(size_t(count));
  return buffer.data();
}

// Head h of batch b: its q, k and v blocks in qkv (rows d.row() apart), and the same blocks of dqkv.
template <typename S>
struct Head {
  const S *q, *k, *v;
  S *dq, *dk, *dv;
};
template <typename S>
Head<S> head_of(const Dims& d, int64_t b, int64_t h, const S* qkv, S* dqkv = nullptr) {
  const int64_t offset = b * d.T * d.row() + h * d.Dh;
  S* dq = dqkv != nullptr ? dqkv + offset : nullptr;
  return {qkv + offset, qkv + offset + d.D, qkv + offset + 2 * d.D, dq, dq != nullptr ? dq + d.D : nullptr,
          dq != nullptr ? dq + 2 * d.D : nullptr};
}

// Task `task` of a forward kernel's loop over (batch, head): b and h, the keys that can get any weight
// (L: trailing padding skipped), and the padding mask when it hides keys before L (else null).
struct HeadTask {
  int64_t b, h, L;
  const bool* pad;
};
HeadTask head_task(const Dims& d, int64_t task, const bool* padding) {
  const int64_t b = task / d.H;
  const bool* pad = padding != nullptr ? padding + b * d.T : nullptr;
  const int64_t L = key_extent(pad, d.T);
  return {b, task % d.H, L, padding_holes(pad, L)};
}

// One head's [T, T] block of bfloat16 probabilities widened to float (exact; 16 at a time) or double.
template <typename T>
void widen_from_bf16(const BFloat16* from, T* to, int64_t n) {
  if constexpr (std::is_same_v<T, float>) widen(from, to, n);
  else for (int64_t i = 0; i < n; ++i) to[i] = T(float(from[i]));
}

// A bfloat16 qkv's probabilities are kept pair-major: rows 2q and 2q + 1 of each head's [T, T] block side by
// side, element (i, j) at ((i / 2) T + j) 2 + i % 2 (a zero row after an odd T's last), the layout
// cpu::gemm_bf16_pair_major reads, so that dV = P^T dO reads P in place: packing P^T (pairs of its columns
// interleaved) was most of the bfloat16 backward's packing. dS^T for dK = dS^T Q is written the same way.
// The kept tensor is [B, H, ceil(T / 2), T, 2]; the op (core/ops/attention.cpp, probs_rows) gives the rows back.
int64_t pair_rows(int64_t T) { return (T + 1) / 2 * 2; }

// A head's row-major [T, T] block (rows T apart) into its pair-major block (a checkpoint's recompute).
void to_pair_major(const BFloat16* rows, int64_t T, BFloat16* out) {
  for (int64_t i = 0; i < T; i += 2) {
    const BFloat16* first = rows + i * T;
    BFloat16* pairs = out + i * T;  // pair run i / 2, 2 T long
    if (i + 1 == T) {  // the zero row after an odd T's last
      for (int64_t j = 0; j < T; ++j) pairs[2 * j] = first[j], pairs[2 * j + 1] = BFloat16();
      continue;
    }
    int64_t j = 0;
    for (; j + lanes::kLanes <= T; j += lanes::kLanes) lanes::store_pairs(pairs + 2 * j, first + j, first + T + j);
    for (; j < T; ++j) pairs[2 * j] = first[j], pairs[2 * j + 1] = first[T + j];
  }
}

// Rows i and i + 1 of P from the exponentials in s (masked_softmax_rows without `rounded`) and the rows'
// stats: each times its 1 / sum, rounded as round_scaled rounds it, into `rows` (row-major, T apart; row i + 1
// only when below T, else the pair's second half is 0) and into the pair run `pairs`, zeros from column L on.
void round_pair_rows(const float* s, const float* stats, int64_t i, int64_t T, int64_t L, BFloat16* rows,
                     BFloat16* pairs) {
  const bool second = i + 1 < T;
  const float* s0 = s + i * T;
  const float* s1 = second ? s0 + T : s0;
  const float inv0 = stats[2 * i + 1], inv1 = second ? stats[2 * i + 3] : 0.0f;  // (m, 1 / sum) per row
  BFloat16* row0 = rows + i * T;
  BFloat16* row1 = second ? row0 + T : nullptr;
  int64_t j = 0;
  for (; j + lanes::kLanes <= L; j += lanes::kLanes) {
    const math::Floats16 p0 = lanes::load(s0 + j) * inv0, p1 = lanes::load(s1 + j) * inv1;
    lanes::store_rounded(row0 + j, p0);
    if (second) lanes::store_rounded(row1 + j, p1);
    lanes::store_rounded_pairs(pairs + 2 * j, p0, p1);
  }
  for (; j < L; ++j) {
    const BFloat16 p0(float(s0[j] * inv0)), p1(float(s1[j] * inv1));
    row0[j] = p0;
    if (second) row1[j] = p1;
    pairs[2 * j] = p0, pairs[2 * j + 1] = p1;
  }
  for (; j < T; ++j) {
    row0[j] = BFloat16();
    if (second) row1[j] = BFloat16();
    pairs[2 * j] = pairs[2 * j + 1] = BFloat16();
  }
}

// The bfloat16 backward's dS pass reads the kept probabilities from memory (the forward wrote them long
// before) a pair of rows at a time, with too little work per row for the hardware prefetchers to keep ahead
// (its first load of each row took most of the pass), so each pair asks for the one kPairsAhead pairs on (16
// rows, as far as the row-at-a-time pass before it looked, which made the step 2% faster: alternated runs,
// 1 thread). The float32 backward reads P first in dV's product; the same order
// and prefetch there measured no gain (0.98x median, 1.00x first quartile), so it is left as it was.
constexpr int64_t kPairsAhead = 8;
inline void prefetch_run(const BFloat16* run, int64_t n) {
  for (int64_t j = 0; j < n; j += 32) __builtin_prefetch(run + j);  // a 64-byte line holds 32
}

// Rows i and i + 1 of dS = P (dP - rowsum(dP P)) over the first L columns, from P's pair run `p` (pair-major)
// and dP's rows dp0, dp1 (float32), rounded: into ds (row-major, rows T apart; row i + 1 only when below T) and
// into ds_pairs (the pair run). Each rowsum in row_dot's lane order (row_dot's value on the row widened).
void ds_pair_bf16(const BFloat16* p, const float* dp0, const float* dp1, int64_t i, int64_t T, int64_t L,
                  BFloat16* ds, BFloat16* ds_pairs) {
  lanes::Lanes<float> sums0{}, sums1{};
  math::Floats16 p0, p1;
  int64_t j = 0;
  for (; j + lanes::kLanes <= L; j += lanes::kLanes) {
    lanes::load_widened_pairs(p + 2 * j, p0, p1);
    sums0 += lanes::load(dp0 + j) * p0;
    sums1 += lanes::load(dp1 + j) * p1;
  }
  float dot0 = lanes::lane_total<float>(sums0), dot1 = lanes::lane_total<float>(sums1);
  for (; j < L; ++j) dot0 += dp0[j] * float(p[2 * j]), dot1 += dp1[j] * float(p[2 * j + 1]);
  BFloat16* row0 = ds + i * T;
  BFloat16* row1 = i + 1 < T ? row0 + T : nullptr;
  for (j = 0; j + lanes::kLanes <= L; j += lanes::kLanes) {
    lanes::load_widened_pairs(p + 2 * j, p0, p1);
    const math::Floats16 d0 = p0 * (lanes::load(dp0 + j) - dot0), d1 = p1 * (lanes::load(dp1 + j) - dot1);
    lanes::store_rounded(row0 + j, d0);
    if (row1 != nullptr) lanes::store_rounded(row1 + j, d1);
    lanes::store_rounded_pairs(ds_pairs + 2 * j, d0, d1);
  }
  for (; j < L; ++j) {
    const BFloat16 d0(float(p[2 * j]) * (dp0[j] - dot0)), d1(float(p[2 * j + 1]) * (dp1[j] - dot1));
    row0[j] = d0;
    if (row1 != nullptr) row1[j] = d1;
    ds_pairs[2 * j] = d0, ds_pairs[2 * j + 1] = d1;
  }
}

// out[j] = bfloat16(x[j] * scale): a row of probabilities rounded as they are kept.
template <typename T>
void round_scaled(const T* x, T scale, BFloat16* out, int64_t n) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>)
    for (; j + lanes::kLanes <= n; j += lanes::kLanes) lanes::store_rounded(out + j, lanes::load(x + j) * scale);
  for (; j < n; ++j) out[j] = BFloat16(float(x[j] * scale));
}

// Row i's masked keys (padding; with `causal`, the keys after i) set to -inf.
template <typename T>
void hide_masked(T* row, int64_t i, int64_t cols, const bool* padding, bool causal) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (padding != nullptr)
    for (int64_t j = 0; j < cols; ++j) row[j] = padding[j] ? neg_inf : row[j];
  if (causal)
    for (int64_t j = i + 1; j < cols; ++j) row[j] = neg_inf;
}

// Masked scores -> probabilities, in place, row by row, over the first `cols` columns of rows
// `ld` apart; columns cols..ld-1 are set to 0. Masked entries become exactly 0, and so does every
// entry of a row with no unmasked key (a query that sees nothing: output 0, no gradient; not NaN).
// rounded (or null): also gets the probabilities rounded to bfloat16, in the same pass, rows `ld` apart;
// only there when !keep_float (s then holds the unnormalised exponentials). !keep_float without `rounded`:
// s keeps the exponentials (columns from cols on not written), and stats the factors (round_pair_rows).
// stats (or null): gets each row's max m and 1 / sum e^(s - m), two per row (-inf and 0 for a row that
// sees nothing), from which softmax_rows_from_stats rebuilds the same probabilities.
template <typename T>
void masked_softmax_rows(T* s, int64_t rows, int64_t cols, int64_t ld, const bool* padding, bool causal,
                         BFloat16* rounded = nullptr, bool keep_float = true, T* stats = nullptr) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = s + i * ld;
    BFloat16* row16 = rounded != nullptr ? rounded + i * ld : nullptr;
    hide_masked(row, i, cols, padding, causal);
    T m = row_max(row, cols);
    if (m == -std::numeric_limits<T>::infinity()) {
      for (int64_t j = 0; j < ld; ++j) row[j] = T(0);
      if (row16 != nullptr) std::fill(row16, row16 + ld, BFloat16());
      if (stats != nullptr) stats[2 * i] = m, stats[2 * i + 1] = T(0);
      continue;
    }
    T inv = T(1) / row_exp_store_sum(row, m, row, cols);
    if (stats != nullptr) stats[2 * i] = m, stats[2 * i + 1] = inv;
    if (!keep_float && row16 == nullptr) continue;  // the exponentials stay, for round_pair_rows
    if (row16 != nullptr && !keep_float) {
      round_scaled(row, inv, row16, cols);
      std::fill(row16 + cols, row16 + ld, BFloat16());
      continue;
    }
    if (row16 != nullptr) {
      for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
      if constexpr (std::is_same_v<T, float>) narrow(row, row16, cols);
      else for (int64_t j = 0; j < cols; ++j) row16[j] = BFloat16(float(row[j]));
      std::fill(row16 + cols, row16 + ld, BFloat16());
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
    }
    for (int64_t j = cols; j < ld; ++j) row[j] = T(0);
  }
}

// The probabilities again, from the masked scores and the rows' kept max and 1 / sum (masked_softmax_rows'
// `stats`): each is e^(s - m) * (1 / sum), the same exponential times the same factor, so the same bits,
// in one pass instead of three (no max, no sum). rounded (or null): as above; s keeps the float32 ones.
template <typename T>
void softmax_rows_from_stats(T* s, int64_t rows, int64_t cols, int64_t ld, const bool* padding, bool causal,
                             const T* stats, BFloat16* rounded = nullptr) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = s + i * ld;
    BFloat16* row16 = rounded != nullptr ? rounded + i * ld : nullptr;
    const T m = stats[2 * i], inv = stats[2 * i + 1];
    if (m == -std::numeric_limits<T>::infinity()) {  // a row that sees nothing
      std::fill(row, row + ld, T(0));
      if (row16 != nullptr) std::fill(row16, row16 + ld, BFloat16());
      continue;
    }
    hide_masked(row, i, cols, padding, causal);
    row_exp_scaled(row, m, inv, row, cols);
    std::fill(row + cols, row + ld, T(0));
    if (row16 != nullptr) {
      if constexpr (std::is_same_v<T, float>) narrow(row, row16, cols);
      else for (int64_t j = 0; j < cols; ++j) row16[j] = BFloat16(float(row[j]));
      std::fill(row16 + cols, row16 + ld, BFloat16());
    }
  }
}

// probs: where the probabilities are kept as T, or null; probs_bf16: kept as bfloat16 instead, or null;
// stats: where each row's softmax max and 1 / sum are kept ([B, H, T, 2]), or null.
template <typename T>
void forward_kernel(const Dims& d, const T* qkv, const bool* padding, bool causal, T* out, T* probs,
                    BFloat16* probs_bf16, T* stats, bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const auto [b, h, L, pad] = head_task(d, task, padding);
      const Head<T> head = head_of(d, b, h, qkv);
      T* p = probs != nullptr ? probs + task * d.T * d.T : scratch<T>(d.T * d.T);
      // S = scale Q K^T: K^T is K read with swapped strides.
      product(bf16, d.T, L, d.Dh, scale, head.q, d.row(), 1, head.k, 1, d.row(), T(0), p, d.T);
      BFloat16* p16 = probs_bf16 != nullptr ? probs_bf16 + task * d.T * d.T : nullptr;
      T* row_stats = stats != nullptr ? stats + task * d.T * 2 : nullptr;
      masked_softmax_rows(p, d.T, L, d.T, pad, causal, p16, /*keep_float=*/true, row_stats);
      // O = P V, written as head h's columns of the merged [B, T, D] output.
      product(bf16, d.T, d.Dh, L, T(1), p, d.T, 1, head.v, d.row(), 1, T(0), out + b * d.T * d.D + h * d.Dh, d.D);
    }
  });
}

// The forward's probabilities again from its rows' stats (a checkpoint's recompute, which has the output
// already): S = scale Q K^T as the forward computed it, then softmax_rows_from_stats. Kept as T (probs)
// or bfloat16 (probs_bf16), as forward_kernel keeps them.
template <typename T>
void probs_kernel(const Dims& d, const T* qkv, const bool* padding, bool causal, const T* stats, T* probs,
                  BFloat16* probs_bf16, bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const auto [b, h, L, pad] = head_task(d, task, padding);
      const Head<T> head = head_of(d, b, h, qkv);
      T* p = probs != nullptr ? probs + task * d.T * d.T : scratch<T>(d.T * d.T);
      product(bf16, d.T, L, d.Dh, scale, head.q, d.row(), 1, head.k, 1, d.row(), T(0), p, d.T);
      softmax_rows_from_stats(p, d.T, L, d.T, pad, causal, stats + task * d.T * 2,
                              probs_bf16 != nullptr ? probs_bf16 + task * d.T * d.T : nullptr);
    }
  });
}

// probs: pair-major (pair_rows).
void probs_kernel_bf16(const Dims& d, const BFloat16* qkv, const bool* padding, bool causal, const float* stats,
                       BFloat16* probs) {
  const float scale = 1.0f / std::sqrt(float(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const auto [b, h, L, pad] = head_task(d, task, padding);
      const Head<BFloat16> head = head_of(d, b, h, qkv);
      float* s = scratch<float>(d.T * d.T);
      BFloat16* p = scratch<BFloat16>(d.T * d.T);
      gemm_bf16(d.T, L, d.Dh, scale, head.q, d.row(), 1, head.k, 1, d.row(), 0.0f, s, d.T);
      softmax_rows_from_stats(s, d.T, L, d.T, pad, causal, stats + task * d.T * 2, p);
      to_pair_major(p, d.T, probs + task * pair_rows(d.T) * d.T);
    }
  });
}

// probs: the kept probabilities as T, or null when they were kept as bfloat16 (probs_bf16).
template <typename T>
void backward_kernel(const Dims& d, const T* grad, const T* qkv, const T* probs, const BFloat16* probs_bf16,
                     const bool* padding, T* dqkv, bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / d.H, h = task % d.H;
      const int64_t L = key_extent(padding != nullptr ? padding + b * d.T : nullptr, d.T);
      const auto [q, k, v, dq, dk, dv] = head_of(d, b, h, qkv, dqkv);
      const T* p = probs != nullptr ? probs + task * d.T * d.T : nullptr;
      if (p == nullptr) {  // bfloat16 probabilities: this head's block widened, in cache for the four uses below
        T* widened = scratch<T, 1>(d.T * d.T);
        widen_from_bf16(probs_bf16 + task * d.T * d.T, widened, d.T * d.T);
        p = widened;
      }
      const T* go = grad + b * d.T * d.D + h * d.Dh;  // dO of this head, row stride D
      T* ds = scratch<T>(d.T * d.T);
      product(bf16, L, d.Dh, d.T, T(1), p, 1, d.T, go, d.D, 1, T(0), dv, d.row());  // dV = P^T dO
      product(bf16, d.T, L, d.Dh, T(1), go, d.D, 1, v, 1, d.row(), T(0), ds, d.T);  // dP = dO V^T
      for (int64_t i = 0; i < d.T; ++i) {                                  // dS = P (dP - rowsum(dP P))
        T* row = ds + i * d.T;
        const T* prow = p + i * d.T;
        const T dot = row_dot(row, prow, L);
        for (int64_t j = 0; j < L; ++j) row[j] = prow[j] * (row[j] - dot);
      }
      product(bf16, d.T, d.Dh, L, scale, ds, d.T, 1, k, d.row(), 1, T(0), dq, d.row());  // dQ = scale dS K
      product(bf16, L, d.Dh, d.T, scale, ds, 1, d.T, q, d.row(), 1, T(0), dk, d.row());  // dK = scale dS^T Q
      for (int64_t j = L; j < d.T; ++j)  // keys no query attends to: no gradient
        for (int64_t c = 0; c < d.Dh; ++c) dk[j * d.row() + c] = dv[j * d.row() + c] = T(0);
    }
  });
}

// bfloat16 qkv (a mixed-precision model's projection): every product reads bfloat16 blocks and sums in
// float32; the scores, the softmax and dS are float32 in the per-thread scratch, and P and dS are rounded
// to bfloat16 for the products that read them (as the float32 path's packing rounds them). out and the
// gradient are bfloat16, each entry rounded once as its tile is stored. probs (kept): pair-major (pair_rows).
void forward_kernel_bf16(const Dims& d, const BFloat16* qkv, const bool* padding, bool causal, BFloat16* out,
                         BFloat16* probs, float* stats) {
  const float scale = 1.0f / std::sqrt(float(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const auto [b, h, L, pad] = head_task(d, task, padding);
      const Head<BFloat16> head = head_of(d, b, h, qkv);
      float* s = scratch<float>(d.T * d.T);
      BFloat16* p = scratch<BFloat16>(d.T * d.T);  // row-major, for P V (in cache)
      float* row_stats = stats != nullptr ? stats + task * d.T * 2 : scratch<float, 1>(d.T * 2);
      gemm_bf16(d.T, L, d.Dh, scale, head.q, d.row(), 1, head.k, 1, d.row(), 0.0f, s, d.T);  // S = scale Q K^T
      if (probs == nullptr) {
        masked_softmax_rows(s, d.T, L, d.T, pad, causal, p, /*keep_float=*/false, row_stats);
      } else {  // the rounded P into p and, two rows at a time, the kept pair-major block
        masked_softmax_rows<float>(s, d.T, L, d.T, pad, causal, nullptr, /*keep_float=*/false, row_stats);
        BFloat16* kept = probs + task * pair_rows(d.T) * d.T;
        for (int64_t i = 0; i < d.T; i += 2) round_pair_rows(s, row_stats, i, d.T, L, p, kept + i * d.T);
      }
      gemm_bf16(d.T, d.Dh, L, 1.0f, p, d.T, 1, head.v, d.row(), 1, out + b * d.T * d.D + h * d.Dh, d.D);  // O = P V
    }
  });
}

void backward_kernel_bf16(const Dims& d, const BFloat16* grad, const BFloat16* qkv, const BFloat16* probs,
                          const bool* padding, BFloat16* dqkv) {
  const float scale = 1.0f / std::sqrt(float(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / d.H, h = task % d.H;
      const int64_t L = key_extent(padding != nullptr ? padding + b * d.T : nullptr, d.T);
      const auto [q, k, v, dq, dk, dv] = head_of(d, b, h, qkv, dqkv);
      const int64_t T2 = pair_rows(d.T);
      const BFloat16* p_pairs = probs + task * T2 * d.T;
      const BFloat16* go = grad + b * d.T * d.D + h * d.Dh;  // dO of this head, row stride D
      float* dp = scratch<float>(T2 * d.T);
      if (T2 > d.T) std::fill(dp + d.T * d.T, dp + T2 * d.T, 0.0f);  // dP's row after an odd T's last: zero
      BFloat16* ds = scratch<BFloat16>(d.T * d.T);
      BFloat16* ds_pairs = scratch<BFloat16, 1>(T2 * d.T);
      gemm_bf16(d.T, L, d.Dh, 1.0f, go, d.D, 1, v, 1, d.row(), 0.0f, dp, d.T);          // dP = dO V^T
      for (int64_t i = 0; i < d.T; i += 2) {                                          // dS = P (dP - rowsum(dP P))
        const BFloat16* run = p_pairs + i * d.T;
        if (i + 2 * kPairsAhead < d.T) prefetch_run(run + kPairsAhead * 2 * d.T, 2 * L);
        ds_pair_bf16(run, dp + i * d.T, dp + (i + 1) * d.T, i, d.T, L, ds, ds_pairs + i * d.T);
      }
      gemm_bf16_pair_major(L, d.Dh, d.T, 1.0f, p_pairs, 2 * d.T, go, d.D, 1, dv, d.row());  // dV = P^T dO
      gemm_bf16(d.T, d.Dh, L, scale, ds, d.T, 1, k, d.row(), 1, dq, d.row());              // dQ = scale dS K
      gemm_bf16_pair_major(L, d.Dh, d.T, scale, ds_pairs, 2 * d.T, q, d.row(), 1, dk, d.row());  // dK = scale dS^T Q
      for (int64_t j = L; j < d.T; ++j)  // keys no query attends to: no gradient
        for (int64_t c = 0; c < d.Dh; ++c) dk[j * d.row() + c] = dv[j * d.row() + c] = BFloat16();
    }
  });
}

// ---- Attention over a band (attention.h): query blocks, two key ranges each, nothing [T, T] kept.
namespace banded {

// A block of query rows [i0, i1) and the keys it can see: [0, a) then [lo, hi), a <= lo.
struct Block {
  int64_t i0, i1, a, lo, hi;
  int64_t rows() const { return i1 - i0; }
  int64_t cols() const { return a + (hi - lo); }
  int64_t key(int64_t c) const { return c < a ? c : lo + (c - a); }  // column c's key index
};

constexpr int64_t kMaxRows = 64;  // query rows per block, at most

// The blocks of one (b, h), in order: global queries see every key; the others their window and the
// global keys below it. Rows per block: about the window, 16 to 64 (a wider tile wastes less of the GEMM
// on a small window's corners than it saves in calls).
template <typename Fn>
void for_each_block(int64_t T, int64_t L, AttentionBand w, bool causal, Fn&& fn) {
  const int64_t R = std::clamp<int64_t>(w.window, 16, kMaxRows);
  const int64_t G = std::min(w.global, T);
  for (int64_t i0 = 0; i0 < T; i0 += R) {
    // NOTE: a block never mixes global and windowed queries: the first non-global row starts a block.
    const int64_t i1 = i0 < G ? std::min({i0 + R, G, T}) : std::min(i0 + R, T);
    Block blk{i0, i1, 0, 0, 0};
    if (i0 < G) {
      blk.hi = causal ? std::min(L, i1) : L;
    } else {
      blk.lo = std::min(L, std::max<int64_t>(0, i0 - w.window));
      blk.hi = std::min(L, i1 - 1 + w.window + 1);
      if (causal) blk.hi = std::min(blk.hi, i1);
      blk.hi = std::max(blk.hi, blk.lo);
      blk.a = std::min(G, blk.lo);
    }
    fn(blk);
    if (i1 != i0 + R) i0 = i1 - R;  // a block cut short at the global boundary: the next starts at i1
  }
}

// s [rows, cols] (ld cols) = scale Q_rows K_keys^T, K's two ranges side by side.
template <typename T>
void block_scores(const Block& blk, const Dims& d, T scale, const T* q, const T* k, T* s, bool bf16) {
  const int64_t C = blk.cols();
  const T* qr = q + blk.i0 * d.row();
  product(bf16, blk.rows(), blk.a, d.Dh, scale, qr, d.row(), 1, k, 1, d.row(), T(0), s, C);
  product(bf16, blk.rows(), blk.hi - blk.lo, d.Dh, scale, qr, d.row(), 1, k + blk.lo * d.row(), 1, d.row(), T(0),
          s + blk.a, C);
}

// The columns of row i that see a key, as two runs: [0, hidden_from) (the global keys, and any key < global
// in [lo, hi)) and [first, last) (the keys j of [lo, hi) with |j - i| <= window, all of them for a global
// query, and j <= i if causal). Padding inside the extent (`holes`) is hidden on top of these.
struct SeenRuns {
  int64_t hidden_from, first, last;  // columns
};

SeenRuns seen_runs(const Block& blk, AttentionBand w, bool causal, int64_t i) {
  int64_t first = blk.lo, last = blk.hi;  // keys
  if (i >= w.global) {
    first = std::min(blk.hi, std::max(blk.lo, i - w.window));
    last = std::min(blk.hi, i + w.window + 1);
  }
  if (causal) last = std::min(last, i + 1);
  last = std::max(last, first);
  const int64_t hide_from = std::min(first, std::max(blk.lo, w.global));  // keys < global stay seen
  const auto col = [&](int64_t j) { return blk.a + (j - blk.lo); };       // key j's column, j in [lo, hi]
  return {col(hide_from), col(first), col(last)};
}

// The band's mask and the softmax, in place, row by row: hidden keys get exactly 0, and a row that sees
// no key is all 0 (its output 0, no gradient; docs/attention.md). The softmax runs over the row's two
// runs of seen columns only; the rest is two fills, not a test per element. `holes` is the padding mask
// when a padded key lies before the extent, else null.
// `lse` receives each row's log-sum-exp (-inf for a row that sees nothing), from which the backward
// gets P back in one pass: P = e^(S - lse).
template <typename T>
void block_softmax(const Block& blk, AttentionBand w, const bool* holes, bool causal, T* s, T* lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t C = blk.cols();
  for (int64_t r = 0; r < blk.rows(); ++r) {
    T* row = s + r * C;
    const SeenRuns seen = seen_runs(blk, w, causal, blk.i0 + r);
    // The two runs [0, hidden_from) and [first, last); the columns between and after them are hidden.
    const int64_t n1 = seen.hidden_from, n2 = seen.last - seen.first;
    T* run2 = row + seen.first;
    std::fill(row + seen.hidden_from, run2, T(0));
    std::fill(row + seen.last, row + C, T(0));
    if (holes != nullptr)
      for (int64_t c = 0; c < C; ++c)
        if (holes[blk.key(c)] && (c < n1 || (c >= seen.first && c < seen.last))) row[c] = neg_inf;
    const T m = std::max(row_max(row, n1), row_max(run2, n2));
    if (m == neg_inf) {  // no key seen (a run of nothing but holes, or no run at all)
      std::fill(row, row + C, T(0));
      lse[r] = neg_inf;
      continue;
    }
    const T sum = row_exp_store_sum(row, m, row, n1) + row_exp_store_sum(run2, m, run2, n2);
    lse[r] = m + std::log(sum);
    const T inv = T(1) / sum;
    for (int64_t c = 0; c < n1; ++c) row[c] *= inv;
    for (int64_t c = 0; c < n2; ++c) run2[c] *= inv;
  }
}

// The backward's P from the scores and the forward's log-sum-exp: e^(S - lse) on the seen runs, 0 elsewhere
// (no max, no sum, no normalising pass; hidden columns are never exponentiated).
template <typename T>
void block_probs(const Block& blk, AttentionBand w, const bool* holes, bool causal, const T* lse, T* s) {
  const int64_t C = blk.cols();
  for (int64_t r = 0; r < blk.rows(); ++r) {
    T* row = s + r * C;
    if (lse[r] == -std::numeric_limits<T>::infinity()) {  // the row sees no key
      std::fill(row, row + C, T(0));
      continue;
    }
    const SeenRuns seen = seen_runs(blk, w, causal, blk.i0 + r);
    row_exp_scaled(row, lse[r], T(1), row, seen.hidden_from);
    std::fill(row + seen.hidden_from, row + seen.first, T(0));
    row_exp_scaled(row + seen.first, lse[r], T(1), row + seen.first, seen.last - seen.first);
    std::fill(row + seen.last, row + C, T(0));
    if (holes != nullptr)
      for (int64_t c = 0; c < C; ++c)
        if (holes[blk.key(c)]) row[c] = T(0);
  }
}

template <typename T>
void forward_kernel(const Dims& d, AttentionBand w, const T* qkv, const bool* padding, bool causal, T* out,
                    T* lse, T* probs, bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / d.H, h = task % d.H;
      const bool* pad = padding != nullptr ? padding + b * d.T : nullptr;
      const int64_t L = key_extent(pad, d.T);
      const bool* holes = padding_holes(pad, L);
      const T* q = qkv + b * d.T * d.row() + h * d.Dh;
      const T* k = q + d.D;
      const T* v = q + 2 * d.D;
      T* o = out + b * d.T * d.D + h * d.Dh;  // row stride D
      T* lse_bh = lse + task * d.T;
      for_each_block(d.T, L, w, causal, [&](const Block& blk) {
        const int64_t C = blk.cols();
        T* p = scratch<T, 0>(blk.rows() * C);
        block_scores(blk, d, scale, q, k, p, bf16);
        block_softmax(blk, w, holes, causal, p, lse_bh + blk.i0);
        T* orow = o + blk.i0 * d.D;
        // O = P V over the two ranges (K == 0 leaves C = beta C: a block that sees nothing writes 0).
        product(bf16, blk.rows(), d.Dh, blk.a, T(1), p, C, 1, v, d.row(), 1, T(0), orow, d.D);
        product(bf16, blk.rows(), d.Dh, blk.hi - blk.lo, T(1), p + blk.a, C, 1, v + blk.lo * d.row(), d.row(), 1,
                T(blk.a > 0 ? 1 : 0), orow, d.D);
        if (probs != nullptr) {
          T* dense = probs + task * d.T * d.T;
          for (int64_t r = 0; r < blk.rows(); ++r)
            for (int64_t c = 0; c < C; ++c) dense[(blk.i0 + r) * d.T + blk.key(c)] = p[r * C + c];
        }
      });
    }
  });
}

template <typename T>
void backward_kernel(const Dims& d, AttentionBand w, const T* grad, const T* qkv, const T* out, const T* lse,
                     const bool* padding, bool causal, T* dqkv, bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / d.H, h = task % d.H;
      const bool* pad = padding != nullptr ? padding + b * d.T : nullptr;
      const int64_t L = key_extent(pad, d.T);
      const bool* holes = padding_holes(pad, L);
      const int64_t offset = b * d.T * d.row() + h * d.Dh;
      const T* q = qkv + offset;
      const T* k = q + d.D;
      const T* v = q + 2 * d.D;
      T* dq = dqkv + offset;  // dqkv starts at 0: dK and dV add up over the blocks that see a key
      T* dk = dq + d.D;
      T* dv = dq + 2 * d.D;
      const T* go = grad + b * d.T * d.D + h * d.Dh;  // dO, row stride D
      const T* o = out + b * d.T * d.D + h * d.Dh;    // O, row stride D
      const T* lse_bh = lse + task * d.T;
      for_each_block(d.T, L, w, causal, [&](const Block& blk) {
        const int64_t C = blk.cols(), R = blk.rows(), n = blk.hi - blk.lo;
        T* p = scratch<T, 0>(R * C);
        T* ds = scratch<T, 1>(R * C);
        block_scores(blk, d, scale, q, k, p, bf16);
        block_probs(blk, w, holes, causal, lse_bh + blk.i0, p);
        const T* gor = go + blk.i0 * d.D;
        const T* qr = q + blk.i0 * d.row();
        // dV += P^T dO
        product(bf16, blk.a, d.Dh, R, T(1), p, 1, C, gor, d.D, 1, T(1), dv, d.row());
        product(bf16, n, d.Dh, R, T(1), p + blk.a, 1, C, gor, d.D, 1, T(1), dv + blk.lo * d.row(), d.row());
        // dP = dO V^T
        product(bf16, R, blk.a, d.Dh, T(1), gor, d.D, 1, v, 1, d.row(), T(0), ds, C);
        product(bf16, R, n, d.Dh, T(1), gor, d.D, 1, v + blk.lo * d.row(), 1, d.row(), T(0), ds + blk.a, C);
        // dS = P (dP - rowsum(dO O)): rowsum(dP P) = rowsum(dO O), Dh long
        T dots[kMaxRows] = {};
        row_dots(R, d.Dh, T(1), gor, d.D, o + blk.i0 * d.D, d.D, dots, 1);
        for (int64_t r = 0; r < R; ++r) {
          T* row = ds + r * C;
          const T* prow = p + r * C;
          for (int64_t c = 0; c < C; ++c) row[c] = prow[c] * (row[c] - dots[r]);
        }
        // dQ = scale dS K (each query row in one block: written once)
        T* dqr = dq + blk.i0 * d.row();
        product(bf16, R, d.Dh, blk.a, scale, ds, C, 1, k, d.row(), 1, T(0), dqr, d.row());
        product(bf16, R, d.Dh, n, scale, ds + blk.a, C, 1, k + blk.lo * d.row(), d.row(), 1, T(blk.a > 0 ? 1 : 0),
                dqr, d.row());
        // dK += scale dS^T Q
        product(bf16, blk.a, d.Dh, R, scale, ds, 1, C, qr, d.row(), 1, T(1), dk, d.row());
        product(bf16, n, d.Dh, R, scale, ds + blk.a, 1, C, qr, d.row(), 1, T(1), dk + blk.lo * d.row(), d.row());
      });
    }
  });
}

}  // namespace banded

}  // namespace

AttentionPlan attention_plan(const On& on, int64_t /*B*/, int64_t /*T*/, int64_t /*heads*/, int64_t /*D*/,
                             int64_t window, bool bf16) {
  const Dtype dtype = Dtype(on.dtype);
  AttentionPlan plan;
  if (window >= 0) {  // out and the log-sum-exps; a bfloat16 qkv widened by the op
    plan.takes_bf16 = false;
    plan.probs_dtype = plan.stats_dtype = on.dtype;
    return plan;
  }
  plan.saves_probs = true;
  plan.stats_per_row = 2;
  plan.probs_pair_major = dtype == Dtype::BFloat16;
  plan.probs_dtype = int(dtype == Dtype::BFloat16 || (bf16 && dtype == Dtype::Float32) ? Dtype::BFloat16 : dtype);
  plan.stats_dtype = int(dtype == Dtype::BFloat16 ? Dtype::Float32 : dtype);
  return plan;
}

void attention_forward(const On& on, const void* qkv, const bool* padding, int64_t B, int64_t T, int64_t heads,
                       int64_t D, bool causal, int64_t window, int64_t global, bool bf16, void* out, void* stats,
                       void* probs) {
  const Dims d{B, T, D, heads, D / heads};
  const Dtype dtype = Dtype(on.dtype);
  if (window >= 0) {  // out, the rows' log-sum-exps (stats) and, when asked, the dense weights
    if (probs != nullptr) std::memset(probs, 0, size_t(B * heads * T * T) * dtype_size(dtype));  // 0.0
    dispatch_floating(dtype, "window_attention", [&](auto tag) {
      using S = typename decltype(tag)::type;
      banded::forward_kernel<S>(d, AttentionBand{window, global}, static_cast<const S*>(qkv), padding, causal,
                                static_cast<S*>(out), static_cast<S*>(stats), static_cast<S*>(probs), bf16);
    });
    return;
  }
  if (dtype == Dtype::BFloat16) {  // bfloat16 in and out; the probabilities kept as bfloat16, pair-major
    forward_kernel_bf16(d, static_cast<const BFloat16*>(qkv), padding, causal, static_cast<BFloat16*>(out),
                        static_cast<BFloat16*>(probs), static_cast<float*>(stats));
    return;
  }
  const bool kept_bf16 = bf16 && dtype == Dtype::Float32;
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    forward_kernel<S>(d, static_cast<const S*>(qkv), padding, causal, static_cast<S*>(out),
                      kept_bf16 ? nullptr : static_cast<S*>(probs), kept_bf16 ? static_cast<BFloat16*>(probs) : nullptr,
                      static_cast<S*>(stats), bf16);
  });
}

void attention_probs(const On& on, const void* qkv, const bool* padding, int64_t B, int64_t T, int64_t heads,
                     int64_t D, bool causal, bool bf16, const void* stats, void* probs) {
  const Dims d{B, T, D, heads, D / heads};
  const Dtype dtype = Dtype(on.dtype);
  if (dtype == Dtype::BFloat16) {
    probs_kernel_bf16(d, static_cast<const BFloat16*>(qkv), padding, causal, static_cast<const float*>(stats),
                      static_cast<BFloat16*>(probs));
    return;
  }
  const bool kept_bf16 = bf16 && dtype == Dtype::Float32;
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    probs_kernel<S>(d, static_cast<const S*>(qkv), padding, causal, static_cast<const S*>(stats),
                    kept_bf16 ? nullptr : static_cast<S*>(probs), kept_bf16 ? static_cast<BFloat16*>(probs) : nullptr,
                    bf16);
  });
}

void attention_backward(const On& on, const void* qkv, const bool* padding, int64_t B, int64_t T, int64_t heads,
                        int64_t D, bool causal, int64_t window, int64_t global, bool bf16, const void* out,
                        const void* stats, const void* probs, const void* grad_out, double* /*scratch*/,
                        void* grad_qkv) {
  const Dims d{B, T, D, heads, D / heads};
  const Dtype dtype = Dtype(on.dtype);
  if (window >= 0) {
    std::memset(grad_qkv, 0, size_t(B * T * 3 * D) * dtype_size(dtype));  // all-zero bytes: 0.0
    dispatch_floating(dtype, "window_attention", [&](auto tag) {
      using S = typename decltype(tag)::type;
      banded::backward_kernel<S>(d, AttentionBand{window, global}, static_cast<const S*>(grad_out),
                                 static_cast<const S*>(qkv), static_cast<const S*>(out), static_cast<const S*>(stats),
                                 padding, causal, static_cast<S*>(grad_qkv), bf16);
    });
    return;
  }
  if (dtype == Dtype::BFloat16) {  // the probabilities pair-major bfloat16
    backward_kernel_bf16(d, static_cast<const BFloat16*>(grad_out), static_cast<const BFloat16*>(qkv),
                         static_cast<const BFloat16*>(probs), padding, static_cast<BFloat16*>(grad_qkv));
    return;
  }
  const bool kept_bf16 = bf16 && dtype == Dtype::Float32;  // the probabilities kept as bfloat16
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    backward_kernel<S>(d, static_cast<const S*>(grad_out), static_cast<const S*>(qkv),
                       kept_bf16 ? nullptr : static_cast<const S*>(probs),
                       kept_bf16 ? static_cast<const BFloat16*>(probs) : nullptr, padding, static_cast<S*>(grad_qkv),
                       bf16);
  });
}

}  // namespace ember::cpu
