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
// With a band (window attention): core/cpu/attention_band.cpp (query blocks, cost and memory T x window,
// nothing [T, S] kept).
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
#include <limits>
#include <type_traits>

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
  if (d.window >= 0) return band_forward(on, args, out, stats, probs);  // out, lse, maybe the dense weights
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
  if (d.window >= 0) return band_backward(on, args, out, stats, grad_out, dq, dk, dv);
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
