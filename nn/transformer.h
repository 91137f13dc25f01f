// The pre-LayerNorm Transformer encoder block and the IMDb recipe's classifier built from it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/attention.h"
#include "nn/ngrams.h"

namespace ember::nn {

// x = x + Dropout(MHA(LN(x))); x = x + Dropout(FFN(LN(x))), FFN = Linear -> GELU -> Linear.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t dim, int64_t heads, int64_t ffn_dim, double dropout, Generator& gen);
  // Returns the block's output; `attention_weights`, if given, receives [B, H, T, T].
  // With `checkpointed`, a forward that needs no weights keeps none of the block's intermediates
  // (autograd/checkpoint.h): backward runs the block again, with the same dropout masks.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask, bool causal = false,
                 Tensor* attention_weights = nullptr) const;

  bool checkpointed = false;
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<MultiHeadAttention> attention;
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> drop1, drop2;

 private:
  Tensor forward_once(const Tensor& x, const Tensor& key_padding_mask, bool causal, Tensor* attention_weights) const;
};

struct ClassifierConfig {
  int64_t vocab_size = 20002;
  int64_t max_len = 256;
  int64_t dim = 128;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t ffn_dim = 512;
  int64_t classes = 2;
  double dropout = 0.1;
  int64_t attention_window = -1;  // sliding-window attention: keys within this many positions (-1: full)
  int64_t attention_global = 0;   // with a window: the first tokens that see and are seen by all
  bool checkpoint = false;        // activation checkpointing, per block (autograd/checkpoint.h)
  int64_t bigram_buckets = 0;     // > 0: hashed bigram embeddings (nn/ngrams.h) added to the token embeddings
  BigramHash bigram_hash = BigramHash::ngram;  // their ids' hash (pair: the first bigram models', in their files)
};

// Token + learned position embeddings (+ hashed bigram embeddings, with bigram_buckets) -> dropout ->
// encoder blocks -> final LayerNorm -> mean over real (non-padded) positions -> Linear to class logits.
class TransformerClassifier : public Module {
 public:
  TransformerClassifier(const ClassifierConfig& config, Generator& gen);
  // tokens: int64 [B, T] (0 = padding); key_padding_mask: bool [B, T], true at padding.
  // Returns logits [B, classes]; `attention_weights`, if given, receives one [B, H, T, T] per layer.
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask,
                 std::vector<Tensor>* attention_weights = nullptr) const;
  // The same with the tokens and the positions 0 .. T-1 ([1, T]) staged on the GPU (stage_ids,
  // autograd/ops.h, with buckets): a CUDA graph's step, which uploads nothing (optim/train/graph_step.h).
  // With bigram_buckets, `bigrams` are the tokens' hashed_bigrams, staged the same way.
  Tensor forward(const DeviceIds& tokens, const DeviceIds& positions, const Tensor& key_padding_mask,
                 const DeviceIds* bigrams = nullptr) const;
  // The encoder alone: each token's vector after the blocks and the final LayerNorm, [B, T, dim],
  // before the pooling and the head (masked-token pretraining, examples/imdb/pretrain.h).
  Tensor encode(const Tensor& tokens, const Tensor& key_padding_mask) const;

  ClassifierConfig config;
  std::shared_ptr<Embedding> token_embedding, position_embedding;
  std::shared_ptr<Embedding> bigram_embedding;  // with bigram_buckets only; starts at zero (the model without it)
  std::shared_ptr<Dropout> embedding_dropout;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> blocks;
  std::shared_ptr<LayerNorm> final_norm;
  std::shared_ptr<Linear> head;

 private:
  // From the embeddings' sum [B, T, D] (before dropout) to the logits.
  Tensor forward_embedded(const Tensor& embedded, const Tensor& key_padding_mask,
                          std::vector<Tensor>* attention_weights) const;
  // From the tokens to the embeddings' sum [B, T, D], checked against max_len.
  Tensor embed(const Tensor& tokens) const;
  // From the embeddings' sum to the final LayerNorm's output [B, T, D].
  Tensor encode_embedded(const Tensor& embedded, const Tensor& key_padding_mask,
                         std::vector<Tensor>* attention_weights) const;
};

}  // namespace ember::nn
