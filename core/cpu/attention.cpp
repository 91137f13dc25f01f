// CPU fused multi-head self-attention; see attention.h for the layout and the formulas.
#include "core/cpu/attention.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/softmax.h"
#include "core/error.h"
#include "core/parallel.h"

namespace ember::cpu {
namespace {

struct Dims {
  int64_t B, T, D, H, Dh;
  int64_t row() const { return 3 * D; }  // row stride of qkv
};

// qkv [B, T, 3 D] with D divisible by heads: the op has checked it (core/ops/attention.cpp).
Dims dims_of(const Tensor& qkv, int64_t heads) {
  const int64_t D = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), D, heads, D / heads};
}

// A [T, T] scratch block per thread, for the probabilities when they are not kept and for dS.
template <typename T>
T* scratch(int64_t count) {
  thread_local std::vector<T> buffer;
  if (int64_t(buffer.size()) < count) buffer.resize(size_t(count));
  return buffer.data();
}

// One product of the kernels below: cpu::gemm, or cpu::gemm_bf16 (bfloat16 operands) when `bf16`.
template <typename T>
void product(bool bf16, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
             int64_t b_rs, int64_t b_cs, T* C, int64_t c_rs) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) return gemm_bf16(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, 0.0f, C, c_rs);
  gemm(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, T(0), C, c_rs);
}

// Keys past the last unmasked one get probability exactly 0 from every query: the products skip
// them (with trailing padding, a review of L tokens costs L, not T, keys; a review of padding only, 0).
int64_t key_extent(const bool* padding, int64_t T) {
  if (padding == nullptr) return T;
  int64_t extent = T;
  while (extent > 0 && padding[extent - 1]) --extent;
  return extent;
}

// Masked scores -> probabilities, in place, row by row, over the first `cols` columns of rows
// `ld` apart; columns cols..ld-1 are set to 0. Masked entries become exactly 0, and so does every
// entry of a row with no unmasked key (a query that sees nothing: output 0, no gradient; not NaN).
template <typename T>
void masked_softmax_rows(T* s, int64_t rows, int64_t cols, int64_t ld, const bool* padding, bool causal) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    T* row = s + i * ld;
    if (padding != nullptr)
      for (int64_t j = 0; j < cols; ++j) row[j] = padding[j] ? neg_inf : row[j];
    if (causal)
      for (int64_t j = i + 1; j < cols; ++j) row[j] = neg_inf;
    T m = row_max(row, cols);
    if (m == neg_inf) {
      for (int64_t j = 0; j < ld; ++j) row[j] = T(0);
      continue;
    }
    T inv = T(1) / row_exp_store_sum(row, m, row, cols);
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
    for (int64_t j = cols; j < ld; ++j) row[j] = T(0);
  }
}

template <typename T>
void forward_kernel(const Dims& d, const T* qkv, const bool* padding, bool causal, T* out, T* probs, bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / d.H, h = task % d.H;
      const bool* pad = padding != nullptr ? padding + b * d.T : nullptr;
      const int64_t L = key_extent(pad, d.T);  // keys that can get any weight
      const T* q = qkv + b * d.T * d.row() + h * d.Dh;
      const T* k = q + d.D;
      const T* v = q + 2 * d.D;
      T* p = probs != nullptr ? probs + task * d.T * d.T : scratch<T>(d.T * d.T);
      // S = scale Q K^T: K^T is K read with swapped strides.
      product(bf16, d.T, L, d.Dh, scale, q, d.row(), 1, k, 1, d.row(), p, d.T);
      masked_softmax_rows(p, d.T, L, d.T, pad, causal);
      // O = P V, written as head h's columns of the merged [B, T, D] output.
      product(bf16, d.T, d.Dh, L, T(1), p, d.T, 1, v, d.row(), 1, out + b * d.T * d.D + h * d.Dh, d.D);
    }
  });
}

template <typename T>
void backward_kernel(const Dims& d, const T* grad, const T* qkv, const T* probs, const bool* padding, T* dqkv,
                     bool bf16) {
  const T scale = T(1) / std::sqrt(T(d.Dh));
  parallel_for(0, d.B * d.H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / d.H, h = task % d.H;
      const int64_t L = key_extent(padding != nullptr ? padding + b * d.T : nullptr, d.T);
      const int64_t offset = b * d.T * d.row() + h * d.Dh;
      const T* q = qkv + offset;
      const T* k = q + d.D;
      const T* v = q + 2 * d.D;
      T* dq = dqkv + offset;
      T* dk = dq + d.D;
      T* dv = dq + 2 * d.D;
      const T* p = probs + task * d.T * d.T;
      const T* go = grad + b * d.T * d.D + h * d.Dh;  // dO of this head, row stride D
      T* ds = scratch<T>(d.T * d.T);
      product(bf16, L, d.Dh, d.T, T(1), p, 1, d.T, go, d.D, 1, dv, d.row());  // dV = P^T dO
      product(bf16, d.T, L, d.Dh, T(1), go, d.D, 1, v, 1, d.row(), ds, d.T);  // dP = dO V^T
      for (int64_t i = 0; i < d.T; ++i) {                                  // dS = P (dP - rowsum(dP P))
        T* row = ds + i * d.T;
        const T* prow = p + i * d.T;
        const T dot = row_dot(row, prow, L);
        for (int64_t j = 0; j < L; ++j) row[j] = prow[j] * (row[j] - dot);
      }
      product(bf16, d.T, d.Dh, L, scale, ds, d.T, 1, k, d.row(), 1, dq, d.row());  // dQ = scale dS K
      product(bf16, L, d.Dh, d.T, scale, ds, 1, d.T, q, d.row(), 1, dk, d.row());  // dK = scale dS^T Q
      for (int64_t j = L; j < d.T; ++j)  // keys no query attends to: no gradient
        for (int64_t c = 0; c < d.Dh; ++c) dk[j * d.row() + c] = dv[j * d.row() + c] = T(0);
    }
  });
}

}  // namespace

AttentionForward attention_forward(const Tensor& qkv, int64_t heads, const Tensor& key_padding_mask, bool causal,
                                   bool keep_probs, bool bf16) {
  const Dims d = dims_of(qkv, heads);
  AttentionForward result;
  result.out = Tensor::empty({d.B, d.T, d.D}, qkv.dtype());
  if (keep_probs) result.probs = Tensor::empty({d.B, d.H, d.T, d.T}, qkv.dtype());
  const bool* padding = key_padding_mask.defined() ? key_padding_mask.data<bool>() : nullptr;
  dispatch_floating(qkv.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T>(d, qkv.data<T>(), padding, causal, result.out.data<T>(),
                      keep_probs ? result.probs.data<T>() : nullptr, bf16);
  });
  return result;
}

Tensor attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& probs, int64_t heads,
                          const Tensor& key_padding_mask, bool bf16) {
  const Dims d = dims_of(qkv, heads);
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype());
  dispatch_floating(qkv.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<T>(d, grad_out.data<T>(), qkv.data<T>(), probs.data<T>(),
                       key_padding_mask.defined() ? key_padding_mask.data<bool>() : nullptr, dqkv.data<T>(), bf16);
  });
  return dqkv;
}

}  // namespace ember::cpu
