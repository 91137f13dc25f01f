// Multi-head self-attention, composed from tensor ops (each with its own backward).
#include "nn/attention.h"

#include <cmath>

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
  const int64_t B = x.size(0), T = x.size(1), H = heads, Dh = head_dim;
  // [B, T, 3D] -> [3, B, H, T, Dh]: q, k, v are strided views into the one projection.
  Tensor qkv_heads = qkv->forward(x).view({B, T, 3, H, Dh}).permute({2, 0, 3, 1, 4});
  Tensor q = qkv_heads.select(0, 0), k = qkv_heads.select(0, 1), v = qkv_heads.select(0, 2);

  // NOTE: the 1/sqrt(Dh) scale is applied to q ([B, H, T, Dh]), not to the T/Dh times larger scores.
  Tensor scores = matmul(q * (1.0 / std::sqrt(double(Dh))), k.transpose(-2, -1));  // [B, H, T, T]
  if (key_padding_mask.defined()) {
    EMBER_CHECK(key_padding_mask.dtype() == Dtype::Bool && key_padding_mask.shape() == Shape({B, T}),
                "MultiHeadAttention: key_padding_mask must be bool [{}, {}], got {} {}", B, T,
                dtype_name(key_padding_mask.dtype()), shape_str(key_padding_mask.shape()));
    scores = masked_fill(scores, key_padding_mask.view({B, 1, 1, T}), -INFINITY);
  }
  if (causal) {
    Tensor future = gt(arange(T).view({1, T}), arange(T).view({T, 1}));  // key index > query index
    scores = masked_fill(scores, future, -INFINITY);
  }
  Tensor weights = softmax(scores, -1);
  Tensor merged = matmul(weights, v).transpose(1, 2).reshape({B, T, embed_dim});  // [B, T, H, Dh] -> [B, T, D]
  return {proj->forward(merged), need_weights ? weights : Tensor()};
}

}  // namespace ember::nn
