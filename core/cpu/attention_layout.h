// What the fused CPU attention kernels share (attention.cpp: full attention and the entry points of
// core/kernels.h; attention_band.cpp: attention over a band): what a key padding mask tells them, their
// products' two precisions, the per-thread scratch, one (b, h) task with its masks. Their operands' layout
// is core/attention_args.h's.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/attention_args.h"
#include "core/bfloat16.h"
#include "core/cpu/gemm.h"
#include "core/kernels.h"

namespace ember::cpu::attention_layout {

// Keys past the last unmasked one get probability exactly 0 from every query: the products skip them
// (with trailing padding, a review of L tokens costs L, not S, keys; a review of padding only, 0).
inline int64_t key_extent(const bool* padding, int64_t S) {
  if (padding == nullptr) return S;
  int64_t extent = S;
  while (extent > 0 && padding[extent - 1]) --extent;
  return extent;
}

// The padding mask if a padded key lies before the extent (a hole the mask must still hide), else null:
// right padding, the trainer's, is handled by the extent alone, and the softmax skips the mask pass.
inline const bool* padding_holes(const bool* padding, int64_t extent) {
  return padding != nullptr && std::find(padding, padding + extent, true) != padding + extent ? padding : nullptr;
}

// One product of a kernel: cpu::gemm, or, when `bf16` (the mixed-precision scope, core/precision.h),
// cpu::gemm_bf16: float32 operands rounded to bfloat16 while packed, the sums in float32.
template <typename T>
void product(bool bf16, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
             int64_t b_rs, int64_t b_cs, T beta, T* C, int64_t c_rs) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) return gemm_bf16(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs);
  gemm(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs);
}

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
inline const bool* hidden_keys(const AttentionMask& mask, int64_t b, int64_t h, int64_t S) {
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

// Keys no query attends to (from L on): no gradient.
template <typename S>
void zero_rows(S* block, int64_t row_stride, int64_t from, int64_t to, int64_t cols) {
  for (int64_t j = from; j < to; ++j) std::fill(block + j * row_stride, block + j * row_stride + cols, S());
}

// Attention over a band (attention_band.cpp; core/attention_band.h): attention_forward's and
// attention_backward's work when args.dims.window >= 0 (core/kernels.h's arguments; stats: the rows'
// log-sum-exps [B, H, T] of the operands' dtype, float32 or float64).
void band_forward(const On& on, const AttentionArgs& args, const AttentionOut& out, void* stats, void* probs);
void band_backward(const On& on, const AttentionArgs& args, const AttentionIn& out, const void* stats,
                   const AttentionIn& grad_out, const AttentionOut& dq, const AttentionOut& dk, const AttentionOut& dv);

}  // namespace ember::cpu::attention_layout
