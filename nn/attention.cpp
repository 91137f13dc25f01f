// Multi-head self-attention: the fused QKV projection, the attention op, the output projection.
#include <cstdint>
#include <memory>

#include "nn/attention.h"

namespace ember::nn {

MultiHeadAttention::MultiHeadAttention(int64_t embed_dim, int64_t heads, Generator& gen)
    : embed_dim(embed_dim), heads(heads), head_dim(heads > 0 ? embed_dim / heads : 0) {
  EMBER_CHECK(heads > 0 && embed_dim > 0 && embed_dim % heads == 0,
              "MultiHeadAttention: embed_dim {} is not divisible by heads {}", embed_dim, heads);
  qkv = register_module("qkv", std::make_shared<Linear>(embed_dim, 3 * embed_dim, gen));
  proj = register_module("proj", std::make_shared<Linear>(embed_dim, embed_dim, gen));
}

MultiHeadAttention::Output MultiHeadAttention::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal,
                                                       bool need_weights) const {
  auto scope = forward_scope();
  EMBER_CHECK(x.dim() == 3 && x.size(2) == embed_dim, "MultiHeadAttention: input {} is not [B, T, {}]",
              shape_str(x.shape()), embed_dim);
  // One fused kernel per (batch, head) on the [B, T, 3D] projection, over the band when there is one;
  // attention_reference (core/ops/attention.cpp) is the same computation composed from views, matmul and
  // softmax. `global` counts only with a window (window < 0: full attention).
  Tensor weights;
  Tensor* asked = need_weights ? &weights : nullptr;
  const AttentionBand band = window < 0 ? AttentionBand{} : AttentionBand{window, global};
  Tensor merged = attention(qkv->forward(x), heads, key_padding_mask, causal, asked, band);
  return {proj->forward(merged), need_weights ? weights : Tensor()};
}

}  // namespace ember::nn
