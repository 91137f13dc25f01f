// Online softmax: the softmax of a row of scores computed one tile of keys at a time, keeping only
// a running max m and a running sum l = sum_j e^(s_j - m), and rescaling whatever was built on an
// old max when a larger one turns up (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022).
// This is the math of the tiled attention kernels (cuda/attention_kernels.cu), written once as
// EMBER_HD functions so that a CPU test (tests/core/test_online_softmax.cpp) runs a tiled attention built
// from exactly these functions against the CPU's attention op and softmax.
//
// For one query row, tile after tile of keys:
//   SoftmaxState<T> st = softmax_start<T>();
//   for each tile:  T alpha = softmax_rescale(st, max of the tile's scores);   // l *= alpha
//                   acc *= alpha;                                             // the output so far
//                   p_j = softmax_weight(st, s_j);  acc += sum_j p_j v_j;  softmax_add(st, sum_j p_j);
//   out = acc * softmax_norm(st);  lse = softmax_lse(st);                     // saved for the backward
// Masked scores are -inf and get weight exactly 0. A row with no unmasked key keeps m = -inf, l = 0:
// its output is 0 (softmax_norm gives 0, not 1 / 0) and its lse -inf, so that the backward's
// probabilities e^(s - lse) of its (masked) keys are 0 too: no gradient flows from a query that sees
// nothing. This is the CPU's rule too (core/cpu/attention.cpp, attention_reference; docs/attention.md).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace ember::attn {

// The masking rule of attention, in one place: key j is hidden from query i when it is padding
// (key_padding_mask true) or, with the causal mask, in the future (j > i).
EMBER_HD inline bool key_masked(bool key_is_padding, bool causal, int64_t i, int64_t j) {
  return key_is_padding || (causal && j > i);
}

// Sliding-window attention's band (core/attention_band.h): key j is outside query i's window when
// both are past the first `global` tokens and more than `window` positions apart; window < 0: no band.
EMBER_HD inline bool outside_window(int64_t window, int64_t global, int64_t i, int64_t j) {
  return window >= 0 && i >= global && j >= global && (i - j > window || j - i > window);
}

template <typename T>
struct SoftmaxState {
  T m;  // the largest score seen so far (-inf before the first unmasked one)
  T l;  // sum of e^(s - m) over the scores seen so far
};

template <typename T>
EMBER_HD inline T neg_inf() {
  return T(-INFINITY);
}

template <typename T>
EMBER_HD inline SoftmaxState<T> softmax_start() {
  return {neg_inf<T>(), T(0)};
}

// Moves the state to the max of its own and `tile_max` (the largest score of the next tile) and
// returns alpha = e^(m_old - m_new), the factor that every sum built on the old max (l, and the
// caller's output accumulator) must be multiplied by: 1 when the max did not move, 0 when nothing
// unmasked had been seen. While everything seen is masked the state stays (-inf, 0) and alpha is 1
// (not e^(-inf + inf) = NaN).
template <typename T>
EMBER_HD inline T softmax_rescale(SoftmaxState<T>& st, T tile_max) {
  const T m_new = tile_max > st.m ? tile_max : st.m;
  if (m_new == neg_inf<T>()) return T(1);
  const T alpha = std::exp(st.m - m_new);
  st.l *= alpha;
  st.m = m_new;
  return alpha;
}

// The unnormalised weight e^(s - m) of a score under the current max; exactly 0 for a masked one.
template <typename T>
EMBER_HD inline T softmax_weight(const SoftmaxState<T>& st, T score) {
  return score == neg_inf<T>() ? T(0) : std::exp(score - st.m);
}

// Adds the weights of a tile (their sum, taken by the caller in a fixed order) to the state.
template <typename T>
EMBER_HD inline void softmax_add(SoftmaxState<T>& st, T weight_sum) {
  st.l += weight_sum;
}

// Two states over disjoint sets of keys (two halves of a row, computed apart) as one: the merged
// state, and in alpha_a / alpha_b the factors for each side's accumulator (out = a_acc * alpha_a +
// b_acc * alpha_b). Merging with softmax_start() changes nothing.
template <typename T>
EMBER_HD inline SoftmaxState<T> softmax_merge(const SoftmaxState<T>& a, const SoftmaxState<T>& b, T& alpha_a,
                                              T& alpha_b) {
  const T m = a.m > b.m ? a.m : b.m;
  if (m == neg_inf<T>()) {
    alpha_a = alpha_b = T(1);
    return softmax_start<T>();
  }
  alpha_a = std::exp(a.m - m);
  alpha_b = std::exp(b.m - m);
  return {m, a.l * alpha_a + b.l * alpha_b};
}

// The factor turning the accumulator into the output: 1 / l, or 0 when every key was masked (l = 0:
// the accumulator is 0 and so is the output, where 0 * (1 / 0) would be NaN).
template <typename T>
EMBER_HD inline T softmax_norm(const SoftmaxState<T>& st) {
  return st.l == T(0) ? T(0) : T(1) / st.l;
}

// log sum_j e^(s_j) = m + log l, saved per row for the backward (-inf when every key was masked).
template <typename T>
EMBER_HD inline T softmax_lse(const SoftmaxState<T>& st) {
  return st.m + std::log(st.l);
}

// ---- The backward recomputes the probabilities from the saved lse instead of storing them.

// p_ij = e^(s_ij - lse_i), exactly 0 where masked (so every p of a row with no unmasked key is 0).
// This is also what the forward's `probs` output reports.
template <typename T>
EMBER_HD inline T softmax_prob(bool masked, T score, T lse) {
  return masked ? T(0) : std::exp(score - lse);
}

// The gradient of a score: dS_ij = p_ij (dP_ij - D_i), with dP_ij = dO_i . v_j and
// D_i = dO_i . o_i (= sum_j p_ij dP_ij). Exactly 0 where p_ij = 0, so that a non-finite dP or D
// (an infinite or NaN output gradient) never reaches the gradients of keys the row did not see.
template <typename T>
EMBER_HD inline T softmax_grad_score(T p, T dp, T d_row) {
  return p == T(0) ? T(0) : p * (dp - d_row);
}

}  // namespace ember::attn
