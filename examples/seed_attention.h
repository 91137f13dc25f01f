// The two MultiHeadAttention classes of the documents Ember grew from (../shared/seeds/: 000 with einops, 001
// with view / transpose / matmul), written in Ember line for line: each PyTorch line above its C++ one where
// they differ. They compose the ops one by one (the [B, H, T, S] scores made in full); nn::MultiHeadAttention
// is the same computation with one fused op (docs/attention.md, "The seeds' classes beside Ember's").
// Used by examples/seed_attention.cpp, bench/attention_bench.cpp and tests/nn/test_seed_attention.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/layers.h"

namespace ember::seeds {

// Seed 000: one packed projection, torch.chunk, einops.
class EinopsMultiHeadAttention : public nn::Module {
 public:
  // def __init__(self, embed_dim, num_heads):
  EinopsMultiHeadAttention(int64_t embed_dim, int64_t num_heads, Generator& gen)
      : embed_dim(embed_dim), num_heads(num_heads), head_dim(embed_dim / num_heads) {
    // assert (self.head_dim * num_heads == embed_dim), "Embedding dimension must be divisible by number of heads"
    EMBER_CHECK(head_dim * num_heads == embed_dim, "Embedding dimension must be divisible by number of heads");
    qkv_proj = register_module("qkv_proj", std::make_shared<nn::Linear>(embed_dim, 3 * embed_dim, gen));
    out_proj = register_module("out_proj", std::make_shared<nn::Linear>(embed_dim, embed_dim, gen));
  }

  // return rearrange(x, "b s (h d) -> b h s d", h=self.num_heads)
  Tensor split_heads(const Tensor& x) const { return rearrange(x, "b s (h d) -> b h s d", {{"h", num_heads}}); }
  // return rearrange(x, "b h s d -> b s (h d)")
  Tensor concat_heads(const Tensor& x) const { return rearrange(x, "b h s d -> b s (h d)"); }

  // def forward(self, x, mask=None): ... return output, attn_weights
  std::pair<Tensor, Tensor> forward(const Tensor& x, const Tensor& mask = Tensor()) const {
    // Project Q, K, V
    Tensor qkv = qkv_proj->forward(x);
    // q, k, v = torch.chunk(qkv, 3, dim=-1)
    auto qkv_chunks = chunk(qkv, 3, -1);
    // Split into multiple heads
    Tensor q = split_heads(qkv_chunks[0]);
    Tensor k = split_heads(qkv_chunks[1]);
    Tensor v = split_heads(qkv_chunks[2]);
    // Scaled dot-product attention
    // scores = einsum(q, k, "b h i d, b h j d -> b h i j") / (self.head_dim ** 0.5)
    Tensor scores = einsum("b h i d, b h j d -> b h i j", q, k) / std::pow(double(head_dim), 0.5);
    // if mask is not None: scores = scores.masked_fill(mask == 0, float("-inf"))
    if (mask.defined()) scores = masked_fill(scores, mask == 0, -INFINITY);
    Tensor attn_weights = softmax(scores, -1);
    // output = einsum(attn_weights, v, "b h i j, b h j d -> b h i d")
    Tensor output = einsum("b h i j, b h j d -> b h i d", attn_weights, v);
    // Concatenate heads
    output = concat_heads(output);
    // Final linear projection
    output = out_proj->forward(output);
    return {output, attn_weights};
  }

  int64_t embed_dim, num_heads, head_dim;
  std::shared_ptr<nn::Linear> qkv_proj, out_proj;
};

// Seed 001: separate W_q, W_k, W_v (so keys and values may come from another sequence), view / transpose.
class ViewMultiHeadAttention : public nn::Module {
 public:
  // def __init__(self, d_model, num_heads):
  ViewMultiHeadAttention(int64_t d_model, int64_t num_heads, Generator& gen)
      : d_model(d_model), num_heads(num_heads), d_k(d_model / num_heads) {
    // Q, K, V's linear maps
    W_q = register_module("W_q", std::make_shared<nn::Linear>(d_model, d_model, gen));
    W_k = register_module("W_k", std::make_shared<nn::Linear>(d_model, d_model, gen));
    W_v = register_module("W_v", std::make_shared<nn::Linear>(d_model, d_model, gen));
    // the output's linear map
    W_o = register_module("W_o", std::make_shared<nn::Linear>(d_model, d_model, gen));
  }

  // def forward(self, Q, K, V, mask=None): ... return output, attn_weights
  std::pair<Tensor, Tensor> forward(const Tensor& Q_in, const Tensor& K_in, const Tensor& V_in,
                                    const Tensor& mask = Tensor()) const {
    // batch_size = Q.size(0)
    const int64_t batch_size = Q_in.size(0);
    // Q = self.W_q(Q).view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)
    Tensor Q = W_q->forward(Q_in).view({batch_size, -1, num_heads, d_k}).transpose(1, 2);
    Tensor K = W_k->forward(K_in).view({batch_size, -1, num_heads, d_k}).transpose(1, 2);
    Tensor V = W_v->forward(V_in).view({batch_size, -1, num_heads, d_k}).transpose(1, 2);
    // scores = torch.matmul(Q, K.transpose(-2, -1)) / torch.sqrt(torch.tensor(self.d_k, dtype=torch.float32))
    Tensor scores = matmul(Q, K.transpose(-2, -1)) / sqrt(scalar(double(d_k), Dtype::Float32));
    // if mask is not None: scores = scores.masked_fill(mask == 0, -1e9)
    if (mask.defined()) scores = masked_fill(scores, mask == 0, -1e9);
    // attn_weights = F.softmax(scores, dim=-1)
    Tensor attn_weights = softmax(scores, -1);
    // output = torch.matmul(attn_weights, V)
    Tensor output = matmul(attn_weights, V);
    // output = output.transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
    output = output.transpose(1, 2).contiguous().view({batch_size, -1, d_model});
    // output = self.W_o(output)
    output = W_o->forward(output);
    return {output, attn_weights};
  }

  int64_t d_model, num_heads, d_k;
  std::shared_ptr<nn::Linear> W_q, W_k, W_v, W_o;
};

}  // namespace ember::seeds
