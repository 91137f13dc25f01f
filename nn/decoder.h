// The pre-LayerNorm Transformer decoder block (Vaswani et al. 2017's decoder, normalised before each branch
// as the encoder block is, nn/transformer.h), as PyTorch's nn.TransformerDecoderLayer(norm_first=True):
//   x = x + Dropout(SelfAttention(LN(x), causal))           each position sees itself and the ones before
//   x = x + Dropout(CrossAttention(LN(x), memory))          every position sees the encoder's output
//   x = x + Dropout(FFN(LN(x))),  FFN = Linear -> GELU -> Linear
// For generation, forward_cached runs the block on new positions only, with each attention's keys and
// values kept in a DecoderCache: its outputs equal forward()'s at those positions.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/attention.h"

namespace ember::nn {

// One decoder block's caches: its self-attention's keys and values so far, and its cross-attention's of the
// memory (projected once).
struct DecoderCache {
  KVCache self, cross;
  void clear() { self.clear(), cross.clear(); }
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t dim, int64_t heads, int64_t ffn_dim, double dropout, Generator& gen);
  // x [B, T, D] (the target so far), memory [B, S, D] (the encoder's output). target_padding: bool [B, T],
  // memory_padding: bool [B, S] (true = padding; either may be undefined).
  Tensor forward(const Tensor& x, const Tensor& memory, const Tensor& target_padding = Tensor(),
                 const Tensor& memory_padding = Tensor()) const;
  // The new positions x [B, T_new, D] after cache.self.length earlier ones (inference only: NoGradGuard);
  // `capacity`: the longest target the cache will hold.
  Tensor forward_cached(const Tensor& x, const Tensor& memory, const Tensor& memory_padding, DecoderCache& cache,
                        int64_t capacity) const;

  std::shared_ptr<LayerNorm> ln1, ln2, ln3;
  std::shared_ptr<MultiHeadAttention> self_attention, cross_attention;
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> drop1, drop2, drop3;

 private:
  Tensor feed_forward(const Tensor& x) const;
};

}  // namespace ember::nn
