// CPU scaled dot-product attention, fused per (batch, head), one kernel family for full attention and for
// attention over a band (sliding-window attention, core/attention_band.h). The composed, readable version
// is scaled_dot_product_attention_reference() in autograd/ops/attention.cpp; the tests compare the two.
//
// Layout (core/attention_args.h): q [B, H, T, Dh], k [B, H, S, Dh], v [B, H, S, Dv] and out [B, H, T, Dv],
// each a strided block whose rows are read in place by the GEMMs: head h of a fused [B, T, 3 D] projection
// is the block at column h Dh with row stride 3 D, head h of a [B, T, H, Dh] view the block at h Dh with row
// stride H Dh; no permute or copy is needed, and the output and the gradients are written straight into
// their layouts. Each (b, h) is one task on one thread, every sum in a fixed order: results do not depend on
// the thread count. With a key padding mask (a boolean mask the same for every query), keys after the last
// visible one get probability 0 from every query, so the products stop there: a batch padded to S costs
// each review its own length. Any other mask (per query, or additive) is applied to each row of scores.
//
// Full attention (no band): the scores, their masks, the softmax and the product with V are computed
// for one head at a time, so that its [T, S] block stays in cache and the [B, H, T, S] intermediates
// of the composed version (scores, masked scores, probabilities, and their gradients) are never
// written out; the probabilities are kept for the backward.
// Forward per (b, h):   P = softmax(scale Q K^T + mask)   O = P V
// Backward per (b, h):  dV = P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dP * P))
//                       dQ = scale dS K   dK = scale dS^T Q
//
// With a band: cost and memory grow with T x window, not T S, and nothing [T, S] is kept. Per (b, h),
// queries go in blocks of R rows [i0, i1); the keys a block can see are two ranges: the global keys
// below its window [0, a) and its window [lo, hi) = [i0 - W, i1 - 1 + W] (clipped), so a block's scores
// are an [R, a + hi - lo] tile, made by two GEMMs and masked to the exact band; global queries
// (i < global) are blocks whose one range is every key [0, L).
// Forward per block:   S = scale Q K^T (masked)   P = softmax(S)   O = P V   lse = log sum_j e^S (per row)
// Backward per block:  P = e^(S - lse), S recomputed (nothing [T, S] is saved)
//                      dV += P^T dO   dP = dO V^T   dS = P * (dP - rowsum(dO * O))
//                      dQ = scale dS K   dK += scale dS^T Q
// (rowsum(dP * P) = rowsum(dO * O) since O = P V: Dv terms per row instead of a row of the band.)
// Saved for backward: the output and the [B, H, T] log-sum-exps (with q, k, v and the mask).
//
// The kernels of core/kernels.h (attention_plan, attention_forward, attention_probs, attention_backward).
// A query row whose keys are all masked gets probability 0 on every key: its output row is 0, and no
// gradient flows through it (docs/attention.md).
// Full attention keeps for the backward (attention_plan): the probabilities [B, H, T, S] of the operands'
// dtype, bfloat16 when bf16, and for bfloat16 operands bfloat16 pair-major [B, H, ceil(T / 2), S, 2] (below);
// and, when asked (stats not null: what a checkpoint keeps, autograd/recompute_cache.h), each row's softmax
// max and 1 / sum [B, H, T, 2] (float32 for bfloat16 operands), from which attention_probs rebuilds the same
// probabilities without the forward's other passes. A band keeps out and the rows' log-sum-exps [B, H, T]
// of the operands' dtype (-inf for a query that sees no key); its probabilities, when asked for, are the
// dense [B, H, T, S] weights (0 outside the band; O(T S): for looking at, not for training).
// bf16 (float32 operands only): Q K^T and P V (and the backward's four products) take bfloat16 operands and
// sum in float32 (cpu::gemm_bf16); the scores and the softmax are float32, and P V reads that float32 P
// (rounded while packed). The probabilities kept for the backward are rounded to bfloat16: P V rounds
// them so anyway, and the [B, H, T, S] tensor, the step's largest, then costs half the memory and
// half the traffic. The backward widens each head's block to float32 in cache; dS = P (dP - ...) then
// sees P rounded to bfloat16 (relative error <= 2^-9 per element).
// bfloat16 operands: the same with bfloat16 products throughout (the scores, the softmax and dS in float32),
// a bfloat16 output and gradient, and the probabilities kept as bfloat16, pair-major: rows 2q and 2q + 1 of
// each head's block side by side, so that dV = P^T dO reads P^T in place, unpacked (gemm_bf16_pair_major).
// With a band: the products' operands rounded the same way when bf16 (the softmax, dS and rowsum(dO O) stay
// float32); bfloat16 operands are not taken (attention_plan: the op widens them to float32 first).

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

// [T, S] scratch blocks per thread (full attention, slot 0: the probabilities when they are not kept as T,
// and dS; slot 1: the backward's float32 copy of a head's bfloat16 probabilities. A band's block kernels,
// slot 0: a block's P; slot 1: its dS).
template <typename T, int kSlot = 0>
T* scratch(int64_t count) {
  thread_local std::vector<T> buffer;
  if (int64_t(buffer.size()) < count) buffer.resize(size_t(count));
  return buffer.data();
}

// A mask element of the operands' type S as the compute type T.
template <typename T, typename S>
T widened(S x) {
  if constexpr (std::is_same_v<S, BFloat16>) return T(float(x));
  else return T(x);
}

// One (b, h) of the loop over tasks: its blocks of q, k, v and out (rows of each its operand's row stride
// apart), the keys that can get any weight (L: keys after the last visible one skipped) and the masks its
// rows apply. S: the operands' element type (T, or BFloat16).
template <typename S>
struct Task {
  int64_t b, h, L;
  const S *q, *k, *v;
  const bool* holes;             // a key padding mask's hidden keys when one lies before L, else null
  const AttentionMask* general;  // a mask per query, or additive, or null

  // Row i's scores (scaled, `cols` columns from key 0) with the masks applied: an additive mask added, the
  // hidden keys (the mask's, padding, and with `causal` the keys after i) set to -inf.
  template <typename T>
  void mask_row(T* row, int64_t i, int64_t cols, bool causal) const {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    if (general != nullptr) {
      if (general->additive())
        for (int64_t j = 0; j < cols; ++j) row[j] += widened<T>(general->added<S>(b, h, i, j));
      else
        for (int64_t j = 0; j < cols; ++j) row[j] = general->hides(b, h, i, j) ? neg_inf : row[j];
    }
    if (holes != nullptr)
      for (int64_t j = 0; j < cols; ++j) row[j] = holes[j] ? neg_inf : row[j];
    if (causal)
      for (int64_t j = i + 1; j < cols; ++j) row[j] = neg_inf;
  }
  // Whether any mask but causal applies to a row (else the softmax skips the mask pass).
  bool masks_rows() const { return holes != nullptr || general != nullptr; }
};

// A boolean mask the same for every query, as the hidden keys of (b, h): in place when it is a key padding
// mask read along its keys, else gathered into the thread's buffer.
const bool* hidden_keys(const AttentionMask& mask, int64_t b, int64_t h, int64_t S) {
  if (mask.kind == MaskKind::Hides && mask.col == 1)
    return static_cast<const bool*>(mask.data) + b * mask.batch + h * mask.head;
  thread_local std::vector<char> buffer;
  if (int64_t(buffer.size()) < S) buffer.resize(size_t(S));
  bool* hidden = reinterpret_cast<bool*>(buffer.data());
  for (int64_t j = 0; j < S; ++j) hidden[j] = mask.hides(b, h, 0, j);
  return hidden;
}

template <typename S>
Task<S> task_of(const AttentionArgs& a, int64_t task) {
  const AttentionDims& d = a.dims;
  Task<S> t{task / d.H, task % d.H, d.S, nullptr, nullptr, nullptr, nullptr, nullptr};
  t.q = a.q.at<const S>(t.b, t.h, 0);
  t.k = a.k.at<const S>(t.b, t.h, 0);
  t.v = a.v.at<const S>(t.b, t.h, 0);
  if (a.mask.per_key()) {
    const bool* hidden = hidden_keys(a.mask, t.b, t.h, d.S);
    t.L = key_extent(hidden, d.S);
    t.holes = padding_holes(hidden, t.L);
  } else if (a.mask.on()) {
    t.general = &a.mask;
  }
  return t;
}

// One head's [T, S] block of bfloat16 probabilities widened to float (exact; 16 at a time) or double.
template <typename T>
void widen_from_bf16(const BFloat16* from, T* to, int64_t n) {
  if constexpr (std::is_same_v<T, float>) widen(from, to, n);
  else for (int64_t i = 0; i < n; ++i) to[i] = T(float(from[i]));
}

// bfloat16 operands' probabilities are kept pair-major: rows 2q and 2q + 1 of each head's [T, S] block side
// by side, element (i, j) at ((i / 2) S + j) 2 + i % 2 (a zero row after an odd T's last), the layout
// cpu::gemm_bf16_pair_major reads, so that dV = P^T dO reads P in place: packing P^T (pairs of its columns
// interleaved) was most of the bfloat16 backward's packing. dS^T for dK = dS^T Q is written the same way.
// The kept tensor is [B, H, ceil(T / 2), S, 2]; the op (autograd/ops/attention.cpp, probs_rows) gives the rows back.
int64_t pair_rows(int64_t T) { return (T + 1) / 2 * 2; }

// A head's row-major [T, S] block (rows S apart) into its pair-major block (a checkpoint's recompute).
void to_pair_major(const BFloat16* rows, int64_t T, int64_t S, BFloat16* out) {
  for (int64_t i = 0; i < T; i += 2) {
    const BFloat16* first = rows + i * S;
    BFloat16* pairs = out + i * S;  // pair run i / 2, 2 S long
    if (i + 1 == T) {  // the zero row after an odd T's last
      for (int64_t j = 0; j < S; ++j) pairs[2 * j] = first[j], pairs[2 * j + 1] = BFloat16();
      continue;
    }
    int64_t j = 0;
    for (; j + lanes::kLanes <= S; j += lanes::kLanes) lanes::store_pairs(pairs + 2 * j, first + j, first + S + j);
    for (; j < S; ++j) pairs[2 * j] = first[j], pairs[2 * j + 1] = first[S + j];
  }
}

// Rows i and i + 1 of P from the exponentials in s (masked_softmax_rows without `rounded`; rows S apart) and
// the rows' stats: each times its 1 / sum, rounded as round_scaled rounds it, into `rows` (row-major, S apart;
// row i + 1 only when below T, else the pair's second half is 0) and into the pair run `pairs`, zeros from
// column L on.
void round_pair_rows(const float* s, const float* stats, int64_t i, int64_t T, int64_t S, int64_t L, BFloat16* rows,
                     BFloat16* pairs) {
  const bool second = i + 1 < T;
  const float* s0 = s + i * S;
  const float* s1 = second ? s0 + S : s0;
  const float inv0 = stats[2 * i + 1], inv1 = second ? stats[2 * i + 3] : 0.0f;  // (m, 1 / sum) per row
  BFloat16* row0 = rows + i * S;
  BFloat16* row1 = second ? row0 + S : nullptr;
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
  for (; j < S; ++j) {
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
// and dP's rows dp0, dp1 (float32), rounded: into ds (row-major, rows S apart; row i + 1 only when below T)
// and into ds_pairs (the pair run). Each rowsum in row_dot's lane order (row_dot's value on the row widened).
void ds_pair_bf16(const BFloat16* p, const float* dp0, const float* dp1, int64_t i, int64_t T, int64_t S, int64_t L,
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
  BFloat16* row0 = ds + i * S;
  BFloat16* row1 = i + 1 < T ? row0 + S : nullptr;
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

// Masked scores -> probabilities, in place, row by row, over the first `cols` columns of rows
// `ld` apart; columns cols..ld-1 are set to 0. Masked entries become exactly 0, and so does every
// entry of a row with no unmasked key (a query that sees nothing: output 0, no gradient; not NaN).
// rounded (or null): also gets the probabilities rounded to bfloat16, in the same pass, rows `ld` apart;
// only there when !keep_float (s then holds the unnormalised exponentials). !keep_float without `rounded`:
// s keeps the exponentials (columns from cols on not written), and stats the factors (round_pair_rows).
// stats (or null): gets each row's max m and 1 / sum e^(s - m), two per row (-inf and 0 for a row that
// sees nothing), from which softmax_rows_from_stats rebuilds the same probabilities.
template <typename T, typename S>
void masked_softmax_rows(T* s, int64_t rows, int64_t cols, int64_t ld, const Task<S>& task, bool causal,
                         BFloat16* rounded = nullptr, bool keep_float = true, T* stats = nullptr) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = s + i * ld;
    BFloat16* row16 = rounded != nullptr ? rounded + i * ld : nullptr;
    task.mask_row(row, i, cols, causal);
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
template <typename T, typename S>
void softmax_rows_from_stats(T* s, int64_t rows, int64_t cols, int64_t ld, const Task<S>& task, bool causal,
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
    task.mask_row(row, i, cols, causal);
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
void forward_kernel(const AttentionArgs& a, const AttentionOut& out, T* probs, BFloat16* probs_bf16, T* stats) {
  const AttentionDims& d = a.dims;
  const T scale = attention_scale<T>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<T> t = task_of<T>(a, task);
      T* p = probs != nullptr ? probs + task * d.T * d.S : scratch<T>(d.T * d.S);
      // S = scale Q K^T: K^T is K read with swapped strides.
      product(d.bf16, d.T, t.L, d.Dh, scale, t.q, a.q.row, 1, t.k, 1, a.k.row, T(0), p, d.S);
      BFloat16* p16 = probs_bf16 != nullptr ? probs_bf16 + task * d.T * d.S : nullptr;
      T* row_stats = stats != nullptr ? stats + task * d.T * 2 : nullptr;
      masked_softmax_rows(p, d.T, t.L, d.S, t, d.causal, p16, /*keep_float=*/true, row_stats);
      // O = P V, written into out's block of this head.
      product(d.bf16, d.T, d.Dv, t.L, T(1), p, d.S, 1, t.v, a.v.row, 1, T(0), out.at<T>(t.b, t.h, 0), out.row);
    }
  });
}

// The forward's probabilities again from its rows' stats (a checkpoint's recompute, which has the output
// already): S = scale Q K^T as the forward computed it, then softmax_rows_from_stats. Kept as T (probs)
// or bfloat16 (probs_bf16), as forward_kernel keeps them.
template <typename T>
void probs_kernel(const AttentionArgs& a, const T* stats, T* probs, BFloat16* probs_bf16) {
  const AttentionDims& d = a.dims;
  const T scale = attention_scale<T>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<T> t = task_of<T>(a, task);
      T* p = probs != nullptr ? probs + task * d.T * d.S : scratch<T>(d.T * d.S);
      product(d.bf16, d.T, t.L, d.Dh, scale, t.q, a.q.row, 1, t.k, 1, a.k.row, T(0), p, d.S);
      softmax_rows_from_stats(p, d.T, t.L, d.S, t, d.causal, stats + task * d.T * 2,
                              probs_bf16 != nullptr ? probs_bf16 + task * d.T * d.S : nullptr);
    }
  });
}

// probs: pair-major (pair_rows).
void probs_kernel_bf16(const AttentionArgs& a, const float* stats, BFloat16* probs) {
  const AttentionDims& d = a.dims;
  const float scale = attention_scale<float>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<BFloat16> t = task_of<BFloat16>(a, task);
      float* s = scratch<float>(d.T * d.S);
      BFloat16* p = scratch<BFloat16>(d.T * d.S);
      gemm_bf16(d.T, t.L, d.Dh, scale, t.q, a.q.row, 1, t.k, 1, a.k.row, 0.0f, s, d.S);
      softmax_rows_from_stats(s, d.T, t.L, d.S, t, d.causal, stats + task * d.T * 2, p);
      to_pair_major(p, d.T, d.S, probs + task * pair_rows(d.T) * d.S);
    }
  });
}

// Keys no query attends to (from L on): no gradient.
template <typename S>
void zero_rows(S* block, int64_t row_stride, int64_t from, int64_t to, int64_t cols) {
  for (int64_t j = from; j < to; ++j) std::fill(block + j * row_stride, block + j * row_stride + cols, S());
}

// probs: the kept probabilities as T, or null when they were kept as bfloat16 (probs_bf16).
template <typename T>
void backward_kernel(const AttentionArgs& a, const AttentionIn& grad, const T* probs, const BFloat16* probs_bf16,
                     const AttentionOut& dq_out, const AttentionOut& dk_out, const AttentionOut& dv_out) {
  const AttentionDims& d = a.dims;
  const T scale = attention_scale<T>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<T> t = task_of<T>(a, task);
      const int64_t L = t.L;
      T* dq = dq_out.at<T>(t.b, t.h, 0);
      T* dk = dk_out.at<T>(t.b, t.h, 0);
      T* dv = dv_out.at<T>(t.b, t.h, 0);
      const T* p = probs != nullptr ? probs + task * d.T * d.S : nullptr;
      if (p == nullptr) {  // bfloat16 probabilities: this head's block widened, in cache for the four uses below
        T* widened = scratch<T, 1>(d.T * d.S);
        widen_from_bf16(probs_bf16 + task * d.T * d.S, widened, d.T * d.S);
        p = widened;
      }
      const T* go = grad.at<const T>(t.b, t.h, 0);  // dO of this head, rows grad.row apart
      T* ds = scratch<T>(d.T * d.S);
      product(d.bf16, L, d.Dv, d.T, T(1), p, 1, d.S, go, grad.row, 1, T(0), dv, dv_out.row);  // dV = P^T dO
      product(d.bf16, d.T, L, d.Dv, T(1), go, grad.row, 1, t.v, 1, a.v.row, T(0), ds, d.S);   // dP = dO V^T
      for (int64_t i = 0; i < d.T; ++i) {                                         // dS = P (dP - rowsum(dP P))
        T* row = ds + i * d.S;
        const T* prow = p + i * d.S;
        const T dot = row_dot(row, prow, L);
        for (int64_t j = 0; j < L; ++j) row[j] = prow[j] * (row[j] - dot);
      }
      product(d.bf16, d.T, d.Dh, L, scale, ds, d.S, 1, t.k, a.k.row, 1, T(0), dq, dq_out.row);  // dQ = scale dS K
      product(d.bf16, L, d.Dh, d.T, scale, ds, 1, d.S, t.q, a.q.row, 1, T(0), dk, dk_out.row);  // dK = scale dS^T Q
      zero_rows(dk, dk_out.row, L, d.S, d.Dh);
      zero_rows(dv, dv_out.row, L, d.S, d.Dv);
    }
  });
}

// bfloat16 operands (a mixed-precision model's projection): every product reads bfloat16 blocks and sums in
// float32; the scores, the softmax and dS are float32 in the per-thread scratch, and P and dS are rounded
// to bfloat16 for the products that read them (as the float32 path's packing rounds them). out and the
// gradients are bfloat16, each entry rounded once as its tile is stored. probs (kept): pair-major (pair_rows).
void forward_kernel_bf16(const AttentionArgs& a, const AttentionOut& out, BFloat16* probs, float* stats) {
  const AttentionDims& d = a.dims;
  const float scale = attention_scale<float>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<BFloat16> t = task_of<BFloat16>(a, task);
      float* s = scratch<float>(d.T * d.S);
      BFloat16* p = scratch<BFloat16>(d.T * d.S);  // row-major, for P V (in cache)
      float* row_stats = stats != nullptr ? stats + task * d.T * 2 : scratch<float, 1>(d.T * 2);
      gemm_bf16(d.T, t.L, d.Dh, scale, t.q, a.q.row, 1, t.k, 1, a.k.row, 0.0f, s, d.S);  // S = scale Q K^T
      if (probs == nullptr) {
        masked_softmax_rows(s, d.T, t.L, d.S, t, d.causal, p, /*keep_float=*/false, row_stats);
      } else {  // the rounded P into p and, two rows at a time, the kept pair-major block
        masked_softmax_rows<float>(s, d.T, t.L, d.S, t, d.causal, nullptr, /*keep_float=*/false, row_stats);
        BFloat16* kept = probs + task * pair_rows(d.T) * d.S;
        for (int64_t i = 0; i < d.T; i += 2) round_pair_rows(s, row_stats, i, d.T, d.S, t.L, p, kept + i * d.S);
      }
      gemm_bf16(d.T, d.Dv, t.L, 1.0f, p, d.S, 1, t.v, a.v.row, 1, out.at<BFloat16>(t.b, t.h, 0), out.row);  // O = P V
    }
  });
}

void backward_kernel_bf16(const AttentionArgs& a, const AttentionIn& grad, const BFloat16* probs,
                          const AttentionOut& dq_out, const AttentionOut& dk_out, const AttentionOut& dv_out) {
  const AttentionDims& d = a.dims;
  const float scale = attention_scale<float>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<BFloat16> t = task_of<BFloat16>(a, task);
      const int64_t L = t.L;
      BFloat16* dq = dq_out.at<BFloat16>(t.b, t.h, 0);
      BFloat16* dk = dk_out.at<BFloat16>(t.b, t.h, 0);
      BFloat16* dv = dv_out.at<BFloat16>(t.b, t.h, 0);
      const int64_t T2 = pair_rows(d.T);
      const BFloat16* p_pairs = probs + task * T2 * d.S;
      const BFloat16* go = grad.at<const BFloat16>(t.b, t.h, 0);  // dO of this head, rows grad.row apart
      float* dp = scratch<float>(T2 * d.S);
      if (T2 > d.T) std::fill(dp + d.T * d.S, dp + T2 * d.S, 0.0f);  // dP's row after an odd T's last: zero
      BFloat16* ds = scratch<BFloat16>(d.T * d.S);
      BFloat16* ds_pairs = scratch<BFloat16, 1>(T2 * d.S);
      gemm_bf16(d.T, L, d.Dv, 1.0f, go, grad.row, 1, t.v, 1, a.v.row, 0.0f, dp, d.S);  // dP = dO V^T
      for (int64_t i = 0; i < d.T; i += 2) {                                      // dS = P (dP - rowsum(dP P))
        const BFloat16* run = p_pairs + i * d.S;
        if (i + 2 * kPairsAhead < d.T) prefetch_run(run + kPairsAhead * 2 * d.S, 2 * L);
        ds_pair_bf16(run, dp + i * d.S, dp + (i + 1) * d.S, i, d.T, d.S, L, ds, ds_pairs + i * d.S);
      }
      gemm_bf16_pair_major(L, d.Dv, d.T, 1.0f, p_pairs, 2 * d.S, go, grad.row, 1, dv, dv_out.row);  // dV = P^T dO
      gemm_bf16(d.T, d.Dh, L, scale, ds, d.S, 1, t.k, a.k.row, 1, dq, dq_out.row);                // dQ = scale dS K
      gemm_bf16_pair_major(L, d.Dh, d.T, scale, ds_pairs, 2 * d.S, t.q, a.q.row, 1, dk, dk_out.row);  // dK = scale dS^T Q
      zero_rows(dk, dk_out.row, L, d.S, d.Dh);
      zero_rows(dv, dv_out.row, L, d.S, d.Dv);
    }
  });
}

// ---- Attention over a band (core/attention_band.h): query blocks, two key ranges each, nothing [T, S] kept.
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
      blk.a = std::min(w.global, blk.lo);
    }
    fn(blk);
    if (i1 != i0 + R) i0 = i1 - R;  // a block cut short at the global boundary: the next starts at i1
  }
}

// s [rows, cols] (ld cols) = scale Q_rows K_keys^T, K's two ranges side by side.
template <typename T>
void block_scores(const Block& blk, const AttentionArgs& a, T scale, const Task<T>& t, T* s) {
  const int64_t C = blk.cols(), Dh = a.dims.Dh;
  const bool bf16 = a.dims.bf16;
  const T* qr = t.q + blk.i0 * a.q.row;
  product(bf16, blk.rows(), blk.a, Dh, scale, qr, a.q.row, 1, t.k, 1, a.k.row, T(0), s, C);
  product(bf16, blk.rows(), blk.hi - blk.lo, Dh, scale, qr, a.q.row, 1, t.k + blk.lo * a.k.row, 1, a.k.row, T(0),
          s + blk.a, C);
}

// The columns of row i that see a key, as two runs: [0, hidden_from) (the global keys, and any key < global
// in [lo, hi)) and [first, last) (the keys j of [lo, hi) with |j - i| <= window, all of them for a global
// query, and j <= i if causal). Padding inside the extent (`holes`) and a general mask are applied on top.
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

// A general mask (per query, or additive) on the seen columns of block row r: added, or -inf where it hides.
template <typename T>
void mask_seen(const Block& blk, const SeenRuns& seen, const Task<T>& t, int64_t r, T* row) {
  if (t.general == nullptr) return;
  const int64_t i = blk.i0 + r;
  const auto apply = [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t j = blk.key(c);
      if (t.general->additive()) row[c] += t.general->template added<T>(t.b, t.h, i, j);
      else if (t.general->hides(t.b, t.h, i, j)) row[c] = -std::numeric_limits<T>::infinity();
    }
  };
  apply(0, seen.hidden_from);
  apply(seen.first, seen.last);
}

// The band's mask and the softmax, in place, row by row: hidden keys get exactly 0, and a row that sees
// no key is all 0 (its output 0, no gradient; docs/attention.md). The softmax runs over the row's two
// runs of seen columns only; the rest is two fills, not a test per element. `t.holes` is the padding mask
// when a padded key lies before the extent, else null.
// `lse` receives each row's log-sum-exp (-inf for a row that sees nothing), from which the backward
// gets P back in one pass: P = e^(S - lse).
template <typename T>
void block_softmax(const Block& blk, AttentionBand w, const Task<T>& t, bool causal, T* s, T* lse) {
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
    mask_seen(blk, seen, t, r, row);
    if (t.holes != nullptr)
      for (int64_t c = 0; c < C; ++c)
        if (t.holes[blk.key(c)] && (c < n1 || (c >= seen.first && c < seen.last))) row[c] = neg_inf;
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
// (no max, no sum, no normalising pass; hidden columns are never exponentiated, or give e^-inf = 0).
template <typename T>
void block_probs(const Block& blk, AttentionBand w, const Task<T>& t, bool causal, const T* lse, T* s) {
  const int64_t C = blk.cols();
  for (int64_t r = 0; r < blk.rows(); ++r) {
    T* row = s + r * C;
    if (lse[r] == -std::numeric_limits<T>::infinity()) {  // the row sees no key
      std::fill(row, row + C, T(0));
      continue;
    }
    const SeenRuns seen = seen_runs(blk, w, causal, blk.i0 + r);
    mask_seen(blk, seen, t, r, row);
    row_exp_scaled(row, lse[r], T(1), row, seen.hidden_from);
    std::fill(row + seen.hidden_from, row + seen.first, T(0));
    row_exp_scaled(row + seen.first, lse[r], T(1), row + seen.first, seen.last - seen.first);
    std::fill(row + seen.last, row + C, T(0));
    if (t.holes != nullptr)
      for (int64_t c = 0; c < C; ++c)
        if (t.holes[blk.key(c)]) row[c] = T(0);
  }
}

template <typename T>
void forward_kernel(const AttentionArgs& a, const AttentionOut& out, T* lse, T* probs) {
  const AttentionDims& d = a.dims;
  const AttentionBand w{d.window, d.global};
  const T scale = attention_scale<T>(d);
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<T> t = task_of<T>(a, task);
      T* o = out.at<T>(t.b, t.h, 0);  // rows out.row apart
      T* lse_bh = lse + task * d.T;
      for_each_block(d.T, t.L, w, d.causal, [&](const Block& blk) {
        const int64_t C = blk.cols();
        T* p = scratch<T, 0>(blk.rows() * C);
        block_scores(blk, a, scale, t, p);
        block_softmax(blk, w, t, d.causal, p, lse_bh + blk.i0);
        T* orow = o + blk.i0 * out.row;
        // O = P V over the two ranges (K == 0 leaves C = beta C: a block that sees nothing writes 0).
        product(d.bf16, blk.rows(), d.Dv, blk.a, T(1), p, C, 1, t.v, a.v.row, 1, T(0), orow, out.row);
        product(d.bf16, blk.rows(), d.Dv, blk.hi - blk.lo, T(1), p + blk.a, C, 1, t.v + blk.lo * a.v.row, a.v.row,
                1, T(blk.a > 0 ? 1 : 0), orow, out.row);
        if (probs != nullptr) {
          T* dense = probs + task * d.T * d.S;
          for (int64_t r = 0; r < blk.rows(); ++r)
            for (int64_t c = 0; c < C; ++c) dense[(blk.i0 + r) * d.S + blk.key(c)] = p[r * C + c];
        }
      });
    }
  });
}

// Each task zeroes its dq, dk and dv first: dK and dV add up over the blocks that see a key.
template <typename T>
void backward_kernel(const AttentionArgs& a, const AttentionIn& grad, const AttentionIn& out, const T* lse,
                     const AttentionOut& dq_out, const AttentionOut& dk_out, const AttentionOut& dv_out) {
  const AttentionDims& d = a.dims;
  const AttentionBand w{d.window, d.global};
  const T scale = attention_scale<T>(d);
  const bool bf16 = d.bf16;
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const Task<T> t = task_of<T>(a, task);
      T* dq = dq_out.at<T>(t.b, t.h, 0);
      T* dk = dk_out.at<T>(t.b, t.h, 0);
      T* dv = dv_out.at<T>(t.b, t.h, 0);
      zero_rows(dq, dq_out.row, 0, d.T, d.Dh);
      zero_rows(dk, dk_out.row, 0, d.S, d.Dh);
      zero_rows(dv, dv_out.row, 0, d.S, d.Dv);
      const int64_t q_rs = a.q.row, k_rs = a.k.row, v_rs = a.v.row, g_rs = grad.row;
      const T* go = grad.at<const T>(t.b, t.h, 0);  // dO
      const T* o = out.at<const T>(t.b, t.h, 0);    // O
      const T* lse_bh = lse + task * d.T;
      for_each_block(d.T, t.L, w, d.causal, [&](const Block& blk) {
        const int64_t C = blk.cols(), R = blk.rows(), n = blk.hi - blk.lo;
        T* p = scratch<T, 0>(R * C);
        T* ds = scratch<T, 1>(R * C);
        block_scores(blk, a, scale, t, p);
        block_probs(blk, w, t, d.causal, lse_bh + blk.i0, p);
        const T* gor = go + blk.i0 * g_rs;
        const T* qr = t.q + blk.i0 * q_rs;
        // dV += P^T dO
        product(bf16, blk.a, d.Dv, R, T(1), p, 1, C, gor, g_rs, 1, T(1), dv, dv_out.row);
        product(bf16, n, d.Dv, R, T(1), p + blk.a, 1, C, gor, g_rs, 1, T(1), dv + blk.lo * dv_out.row, dv_out.row);
        // dP = dO V^T
        product(bf16, R, blk.a, d.Dv, T(1), gor, g_rs, 1, t.v, 1, v_rs, T(0), ds, C);
        product(bf16, R, n, d.Dv, T(1), gor, g_rs, 1, t.v + blk.lo * v_rs, 1, v_rs, T(0), ds + blk.a, C);
        // dS = P (dP - rowsum(dO O)): rowsum(dP P) = rowsum(dO O), Dv long
        T dots[kMaxRows] = {};
        row_dots(R, d.Dv, T(1), gor, g_rs, o + blk.i0 * out.row, out.row, dots, 1);
        for (int64_t r = 0; r < R; ++r) {
          T* row = ds + r * C;
          const T* prow = p + r * C;
          for (int64_t c = 0; c < C; ++c) row[c] = prow[c] * (row[c] - dots[r]);
        }
        // dQ = scale dS K (each query row in one block: written once)
        T* dqr = dq + blk.i0 * dq_out.row;
        product(bf16, R, d.Dh, blk.a, scale, ds, C, 1, t.k, k_rs, 1, T(0), dqr, dq_out.row);
        product(bf16, R, d.Dh, n, scale, ds + blk.a, C, 1, t.k + blk.lo * k_rs, k_rs, 1, T(blk.a > 0 ? 1 : 0), dqr,
                dq_out.row);
        // dK += scale dS^T Q
        product(bf16, blk.a, d.Dh, R, scale, ds, 1, C, qr, q_rs, 1, T(1), dk, dk_out.row);
        product(bf16, n, d.Dh, R, scale, ds + blk.a, 1, C, qr, q_rs, 1, T(1), dk + blk.lo * dk_out.row, dk_out.row);
      });
    }
  });
}

}  // namespace banded

}  // namespace

AttentionPlan attention_plan(const On& on, const AttentionArgs& args) {
  const Dtype dtype = Dtype(on.dtype);
  AttentionPlan plan;
  if (args.dims.window >= 0) {  // out and the log-sum-exps; bfloat16 operands widened by the op
    plan.takes_bf16 = false;
    plan.probs_dtype = plan.stats_dtype = on.dtype;
    return plan;
  }
  plan.saves_probs = true;
  plan.stats_per_row = 2;
  plan.probs_pair_major = dtype == Dtype::BFloat16;
  plan.probs_dtype =
      int(dtype == Dtype::BFloat16 || (args.dims.bf16 && dtype == Dtype::Float32) ? Dtype::BFloat16 : dtype);
  plan.stats_dtype = int(dtype == Dtype::BFloat16 ? Dtype::Float32 : dtype);
  return plan;
}

void attention_forward(const On& on, const AttentionArgs& args, const AttentionOut& out, void* stats, void* probs) {
  const AttentionDims& d = args.dims;
  const Dtype dtype = Dtype(on.dtype);
  if (d.window >= 0) {  // out, the rows' log-sum-exps (stats) and, when asked, the dense weights
    if (probs != nullptr) std::memset(probs, 0, size_t(d.B * d.H * d.T * d.S) * dtype_size(dtype));  // 0.0
    dispatch_floating(dtype, "window_attention", [&](auto tag) {
      using S = typename decltype(tag)::type;
      banded::forward_kernel<S>(args, out, static_cast<S*>(stats), static_cast<S*>(probs));
    });
    return;
  }
  if (dtype == Dtype::BFloat16) {  // bfloat16 in and out; the probabilities kept as bfloat16, pair-major
    forward_kernel_bf16(args, out, static_cast<BFloat16*>(probs), static_cast<float*>(stats));
    return;
  }
  const bool kept_bf16 = d.bf16 && dtype == Dtype::Float32;
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    forward_kernel<S>(args, out, kept_bf16 ? nullptr : static_cast<S*>(probs),
                      kept_bf16 ? static_cast<BFloat16*>(probs) : nullptr, static_cast<S*>(stats));
  });
}

void attention_probs(const On& on, const AttentionArgs& args, const void* stats, void* probs) {
  const Dtype dtype = Dtype(on.dtype);
  if (dtype == Dtype::BFloat16) {
    probs_kernel_bf16(args, static_cast<const float*>(stats), static_cast<BFloat16*>(probs));
    return;
  }
  const bool kept_bf16 = args.dims.bf16 && dtype == Dtype::Float32;
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    probs_kernel<S>(args, static_cast<const S*>(stats), kept_bf16 ? nullptr : static_cast<S*>(probs),
                    kept_bf16 ? static_cast<BFloat16*>(probs) : nullptr);
  });
}

void attention_backward(const On& on, const AttentionArgs& args, const AttentionIn& out, const void* stats,
                        const void* probs, const AttentionIn& grad_out, double* /*scratch*/, const AttentionOut& dq,
                        const AttentionOut& dk, const AttentionOut& dv) {
  const AttentionDims& d = args.dims;
  const Dtype dtype = Dtype(on.dtype);
  if (d.window >= 0) {
    dispatch_floating(dtype, "window_attention", [&](auto tag) {
      using S = typename decltype(tag)::type;
      banded::backward_kernel<S>(args, grad_out, out, static_cast<const S*>(stats), dq, dk, dv);
    });
    return;
  }
  if (dtype == Dtype::BFloat16) {  // the probabilities pair-major bfloat16
    backward_kernel_bf16(args, grad_out, static_cast<const BFloat16*>(probs), dq, dk, dv);
    return;
  }
  const bool kept_bf16 = d.bf16 && dtype == Dtype::Float32;  // the probabilities kept as bfloat16
  dispatch_floating(dtype, "attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    backward_kernel<S>(args, grad_out, kept_bf16 ? nullptr : static_cast<const S*>(probs),
                       kept_bf16 ? static_cast<const BFloat16*>(probs) : nullptr, dq, dk, dv);
  });
}

}  // namespace ember::cpu
