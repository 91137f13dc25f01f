// CPU scaled dot-product attention over a band (sliding-window attention, core/attention_band.h): the
// other half of the fused CPU kernel family (core/cpu/attention.cpp: full attention, the entry points of
// core/kernels.h, and the layout and the masks both read). What they share: core/cpu/attention_layout.h.
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
// Each (b, h) is one task on one thread, every sum in a fixed order: results do not depend on the thread
// count. The operands' rows are read in place (strided), the products take bfloat16 operands when bf16
// (the softmax, dS and rowsum(dO O) stay float32); bfloat16 operands are not taken (attention_plan: the
// op widens them to float32 first). Its probabilities, when asked for, are the dense [B, H, T, S] weights
// (0 outside the band; O(T S): for looking at, not for training).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/attention_band.h"
#include "core/cpu/attention_layout.h"
#include "core/cpu/rows.h"
#include "core/dtype.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

using namespace attention_layout;

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

void attention_layout::band_forward(const On& on, const AttentionArgs& args, const AttentionOut& out, void* stats,
                                    void* probs) {
  const AttentionDims& d = args.dims;
  const Dtype dtype = Dtype(on.dtype);
  if (probs != nullptr) std::memset(probs, 0, size_t(d.B * d.H * d.T * d.S) * dtype_size(dtype));  // 0.0
  dispatch_floating(dtype, "window_attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    banded::forward_kernel<S>(args, out, static_cast<S*>(stats), static_cast<S*>(probs));
  });
}

void attention_layout::band_backward(const On& on, const AttentionArgs& args, const AttentionIn& out,
                                     const void* stats, const AttentionIn& grad_out, const AttentionOut& dq,
                                     const AttentionOut& dk, const AttentionOut& dv) {
  dispatch_floating(Dtype(on.dtype), "window_attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    banded::backward_kernel<S>(args, grad_out, out, static_cast<const S*>(stats), dq, dk, dv);
  });
}

}  // namespace ember::cpu
