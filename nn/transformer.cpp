// The pre-LayerNorm encoder block and the IMDb classifier.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/transformer.h"

#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/shape.h"
#include "nn/ngrams.h"

namespace ember::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t dim, int64_t heads, int64_t ffn_dim, double dropout,
                                                 Generator& gen) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(dim));
  attention = register_module("attention", std::make_shared<MultiHeadAttention>(dim, heads, gen));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(dim));
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, ffn_dim, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(ffn_dim, dim, gen));
  drop1 = register_module("drop1", std::make_shared<Dropout>(dropout, gen));
  drop2 = register_module("drop2", std::make_shared<Dropout>(dropout, gen));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal,
                                        Tensor* attention_weights) const {
  auto scope = forward_scope();
  if (!checkpointed || attention_weights != nullptr) return forward_once(x, key_padding_mask, causal, attention_weights);
  std::vector<Generator*> generators{&drop1->generator()};
  if (&drop2->generator() != generators[0]) generators.push_back(&drop2->generator());
  // The two residual branches are checkpointed apart: the backward rebuilds one at a time, so the
  // attention's intermediates and the feed-forward's are never alive together (the same ops as forward_once).
  Tensor h = checkpoint([this, key_padding_mask, causal](const std::vector<Tensor>& in) {
    return in[0] + drop1->forward(attention->forward(ln1->forward(in[0]), key_padding_mask, causal).out);
  }, {x}, generators);
  return checkpoint([this](const std::vector<Tensor>& in) {
    return in[0] + drop2->forward(fc2->forward(gelu(fc1->forward(ln2->forward(in[0])))));
  }, {h}, generators);
}

Tensor TransformerEncoderLayer::forward_once(const Tensor& x, const Tensor& key_padding_mask, bool causal,
                                             Tensor* attention_weights) const {
  auto attended = attention->forward(ln1->forward(x), key_padding_mask, causal, attention_weights != nullptr);
  if (attention_weights != nullptr) *attention_weights = attended.weights;
  Tensor h = x + drop1->forward(attended.out);
  return h + drop2->forward(fc2->forward(gelu(fc1->forward(ln2->forward(h)))));
}

TransformerClassifier::TransformerClassifier(const ClassifierConfig& config, Generator& gen) : config(config) {
  token_embedding = register_module("token_embedding", std::make_shared<Embedding>(config.vocab_size, config.dim, gen));
  position_embedding = register_module("position_embedding", std::make_shared<Embedding>(config.max_len, config.dim, gen));
  embedding_dropout = register_module("embedding_dropout", std::make_shared<Dropout>(config.dropout, gen));
  for (int64_t i = 0; i < config.layers; ++i)
    blocks.push_back(register_module("blocks." + std::to_string(i),
                                     std::make_shared<TransformerEncoderLayer>(config.dim, config.heads, config.ffn_dim,
                                                                               config.dropout, gen)));
  for (const auto& block : blocks) {
    block->checkpointed = config.checkpoint;
    block->attention->window = config.attention_window;
    block->attention->global = config.attention_global;
  }
  final_norm = register_module("final_norm", std::make_shared<LayerNorm>(config.dim));
  head = register_module("head", std::make_shared<Linear>(config.dim, config.classes, gen));
  EMBER_CHECK(config.bigram_buckets >= 0, "TransformerClassifier: bigram_buckets must be >= 0, got {}", config.bigram_buckets);
  if (config.bigram_buckets > 0) {
    // Zeros, drawing nothing: the model starts as the one without it, the same draws and outputs (a
    // pretrained encoder, --init, is untouched until the pairs learn).
    bigram_embedding = register_module("bigram_embedding", std::make_shared<Embedding>(config.bigram_buckets, config.dim));
  }
}

Tensor TransformerClassifier::forward(const Tensor& tokens, const Tensor& key_padding_mask,
                                      std::vector<Tensor>* attention_weights) const {
  auto scope = forward_scope();
  return forward_embedded(embed(tokens), key_padding_mask, attention_weights);
}

Tensor TransformerClassifier::encode(const Tensor& tokens, const Tensor& key_padding_mask) const {
  auto scope = forward_scope();
  return encode_embedded(embed(tokens), key_padding_mask, nullptr);
}

Tensor TransformerClassifier::embed(const Tensor& tokens) const {
  EMBER_CHECK(tokens.dim() == 2, "TransformerClassifier: tokens must be [B, T], got {}", shape_str(tokens.shape()));
  const int64_t T = tokens.size(1);
  EMBER_CHECK(T <= config.max_len, "TransformerClassifier: sequence length {} exceeds max_len {}", T, config.max_len);
  Tensor positions = arange(T).view({1, T}).to(tokens.device());
  Tensor embedded = token_embedding->forward(tokens) + position_embedding->forward(positions);
  if (bigram_embedding) embedded = embedded + bigram_embedding->forward(hashed_bigrams(tokens, config.bigram_buckets, config.bigram_hash));
  return embedded;
}

Tensor TransformerClassifier::forward(const DeviceIds& tokens, const DeviceIds& positions,
                                      const Tensor& key_padding_mask, const DeviceIds* bigrams) const {
  auto scope = forward_scope();
  EMBER_CHECK(tokens.ids.dim() == 2, "TransformerClassifier: tokens must be [B, T], got {}", shape_str(tokens.ids.shape()));
  const int64_t T = tokens.ids.size(1);
  EMBER_CHECK(T <= config.max_len, "TransformerClassifier: sequence length {} exceeds max_len {}", T, config.max_len);
  EMBER_CHECK(positions.ids.shape() == Shape({1, T}), "TransformerClassifier: positions must be [1, {}], got {}", T,
              shape_str(positions.ids.shape()));
  EMBER_CHECK((bigrams != nullptr) == bool(bigram_embedding), "TransformerClassifier: a model {} bigram embeddings "
              "was given {} bigram ids", bigram_embedding ? "with" : "without", bigrams != nullptr ? "staged" : "no");
  Tensor embedded = embedding(token_embedding->weight, tokens) + embedding(position_embedding->weight, positions);
  if (bigrams != nullptr) {
    EMBER_CHECK(bigrams->ids.shape() == tokens.ids.shape(), "TransformerClassifier: bigram ids {} for tokens {}",
                shape_str(bigrams->ids.shape()), shape_str(tokens.ids.shape()));
    embedded = embedded + embedding(bigram_embedding->weight, *bigrams);
  }
  return forward_embedded(embedded, key_padding_mask, nullptr);
}

Tensor TransformerClassifier::encode_embedded(const Tensor& embedded, const Tensor& key_padding_mask,
                                              std::vector<Tensor>* attention_weights) const {
  Tensor x = embedding_dropout->forward(embedded);
  if (attention_weights != nullptr) attention_weights->clear();
  for (const auto& block : blocks) {
    Tensor weights;
    x = block->forward(x, key_padding_mask, /*causal=*/false, attention_weights ? &weights : nullptr);
    if (attention_weights != nullptr) attention_weights->push_back(weights);
  }
  return final_norm->forward(x);
}

Tensor TransformerClassifier::forward_embedded(const Tensor& embedded, const Tensor& key_padding_mask,
                                               std::vector<Tensor>* attention_weights) const {
  const int64_t B = embedded.size(0), T = embedded.size(1);
  Tensor x = encode_embedded(embedded, key_padding_mask, attention_weights);
  // Mean over real positions: padded positions are left out of the pooling.
  Tensor keep = key_padding_mask.defined() ? where(key_padding_mask, zeros({1}, x.dtype(), x.device()), ones({1}, x.dtype(), x.device()))
                                           : ones({B, T}, x.dtype(), x.device());
  Tensor counts = sum(keep, {1}, /*keepdim=*/true);  // [B, 1]
  Tensor pooled = sum(x * keep.view({B, T, 1}), {1}) / counts;  // [B, D]
  return head->forward(pooled);
}

}  // namespace ember::nn
