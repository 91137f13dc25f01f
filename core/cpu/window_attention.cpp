// CPU fused sliding-window attention; see window_attention.h for the pattern, the blocks and the formulas.
#include "core/cpu/window_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu/attention_layout.h"
#include "core/cpu/gemm.h"
#include "core/cpu/rows.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

using namespace attention_layout;

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
void for_each_block(int64_t T, int64_t L, AttentionWindow w, bool causal, Fn&& fn) {
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

SeenRuns seen_runs(const Block& blk, AttentionWindow w, bool causal, int64_t i) {
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
void block_softmax(const Block& blk, AttentionWindow w, const bool* holes, bool causal, T* s, T* lse) {
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
void block_probs(const Block& blk, AttentionWindow w, const bool* holes, bool causal, const T* lse, T* s) {
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

// A per-thread scratch buffer (slot 0: P, slot 1: dS).
template <typename T>
T* scratch(int slot, int64_t count) {
  thread_local std::vector<T> buffers[2];
  if (int64_t(buffers[slot].size()) < count) buffers[slot].resize(size_t(count));
  return buffers[slot].data();
}

template <typename T>
void forward_kernel(const Dims& d, AttentionWindow w, const T* qkv, const bool* padding, bool causal, T* out,
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
        T* p = scratch<T>(0, blk.rows() * C);
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
void backward_kernel(const Dims& d, AttentionWindow w, const T* grad, const T* qkv, const T* out, const T* lse,
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
        T* p = scratch<T>(0, R * C);
        T* ds = scratch<T>(1, R * C);
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

}  // namespace

Tensor window_attention_forward(const Tensor& qkv, int64_t heads, AttentionWindow window,
                                const Tensor& key_padding_mask, bool causal, Tensor& lse, Tensor* probs, bool bf16) {
  const Dims d = dims_of(qkv, heads);
  Tensor out = Tensor::empty({d.B, d.T, d.D}, qkv.dtype());
  lse = Tensor::empty({d.B, d.H, d.T}, qkv.dtype());
  if (probs != nullptr) {
    *probs = Tensor::empty({d.B, d.H, d.T, d.T}, qkv.dtype());
    std::memset(probs->raw_data(), 0, size_t(probs->numel()) * dtype_size(probs->dtype()));  // all-zero bytes: 0.0
  }
  const bool* padding = key_padding_mask.defined() ? key_padding_mask.data<bool>() : nullptr;
  dispatch_floating(qkv.dtype(), "window_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T>(d, window, qkv.data<T>(), padding, causal, out.data<T>(), lse.data<T>(),
                      probs != nullptr ? probs->data<T>() : nullptr, bf16);
  });
  return out;
}

Tensor window_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                 int64_t heads, AttentionWindow window, const Tensor& key_padding_mask, bool causal,
                                 bool bf16) {
  const Dims d = dims_of(qkv, heads);
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype());
  std::memset(dqkv.raw_data(), 0, size_t(dqkv.numel()) * dtype_size(dqkv.dtype()));  // all-zero bytes: 0.0
  const bool* padding = key_padding_mask.defined() ? key_padding_mask.data<bool>() : nullptr;
  dispatch_floating(qkv.dtype(), "window_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<T>(d, window, grad_out.data<T>(), qkv.data<T>(), out.data<T>(), lse.data<T>(), padding, causal,
                       dqkv.data<T>(), bf16);
  });
  return dqkv;
}

}  // namespace ember::cpu
