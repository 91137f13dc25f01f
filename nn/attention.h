// Multi-head self-attention with one fused QKV projection. heads = 1 is single-head attention.
//
//   B = batch, T = sequence length, D = embed_dim, H = heads, Dh = D / H (head size)
//   qkv = x @ Wqkv^T + b          [B, T, 3D] -> q, k, v as [B, H, T, Dh] (strided views, no copy)
//   scores = q @ k^T / sqrt(Dh)   [B, H, T, T], padded keys (and future keys if causal) set to -inf
//   weights = softmax(scores)     each query's distribution over keys
//   out = (weights @ v) merged    [B, T, D] -> output projection
#pragma once
#include <cstdint>
#include <memory>

#include "nn/layers.h"

namespace ember::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t embed_dim, int64_t heads, Generator& gen);

  struct Output {
    Tensor out;      // [B, T, D]
    Tensor weights;  // [B, H, T, T], only when asked for
  };
  // key_padding_mask: bool [B, T], true where the token is padding (its key gets no attention).
  // causal: query t attends to keys <= t only.
  Output forward(const Tensor& x, const Tensor& key_padding_mask = Tensor(), bool causal = false,
                 bool need_weights = false) const;

  int64_t embed_dim, heads, head_dim;
  // Sliding-window attention (attention's band in core/ops.h): keys within `window` positions of a
  // query, plus the first `global` tokens; window < 0 (the default) is full attention.
  int64_t window = -1, global = 0;
  std::shared_ptr<Linear> qkv, proj;
};

}  // namespace ember::nn
