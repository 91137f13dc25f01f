// The pre-LN decoder block: causal self-attention, cross-attention on the encoder's output, feed-forward.
#include <cstdint>
#include <memory>

#include "nn/decoder.h"

#include "core/error.h"

namespace ember::nn {

TransformerDecoderLayer::TransformerDecoderLayer(int64_t dim, int64_t heads, int64_t ffn_dim, double dropout,
                                                 Generator& gen) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(dim));
  self_attention = register_module("self_attention", std::make_shared<MultiHeadAttention>(dim, heads, gen));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(dim));
  cross_attention = register_module("cross_attention", std::make_shared<MultiHeadAttention>(dim, heads, gen));
  ln3 = register_module("ln3", std::make_shared<LayerNorm>(dim));
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, ffn_dim, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(ffn_dim, dim, gen));
  drop1 = register_module("drop1", std::make_shared<Dropout>(dropout, gen));
  drop2 = register_module("drop2", std::make_shared<Dropout>(dropout, gen));
  drop3 = register_module("drop3", std::make_shared<Dropout>(dropout, gen));
}

Tensor TransformerDecoderLayer::feed_forward(const Tensor& x) const {
  return x + drop3->forward(fc2->forward(gelu(fc1->forward(ln3->forward(x)))));
}

Tensor TransformerDecoderLayer::forward(const Tensor& x, const Tensor& memory, const Tensor& target_padding,
                                        const Tensor& memory_padding) const {
  auto scope = forward_scope();
  Tensor h = x + drop1->forward(self_attention->forward(ln1->forward(x), target_padding, /*causal=*/true).out);
  const Tensor q = ln2->forward(h);
  AttentionMasks masks;
  masks.key_padding_mask = memory_padding;
  h = h + drop2->forward(cross_attention->forward(q, memory, memory, masks).out);
  return feed_forward(h);
}

Tensor TransformerDecoderLayer::forward_cached(const Tensor& x, const Tensor& memory, const Tensor& memory_padding,
                                               DecoderCache& cache, int64_t capacity) const {
  auto scope = forward_scope();
  Tensor h = x + drop1->forward(self_attention->forward_cached(ln1->forward(x), cache.self, capacity));
  h = h + drop2->forward(cross_attention->forward_cached(ln2->forward(h), memory, memory_padding, cache.cross));
  return feed_forward(h);
}

}  // namespace ember::nn
