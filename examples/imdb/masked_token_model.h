// The pretraining model: the classifier's encoder (its embeddings, blocks and final LayerNorm, under the
// classifier's own parameter names) with a masked-token head, BERT's: a dense layer, GELU and LayerNorm,
// then the output projection tied to the token embedding (its transpose) plus a bias per token. The head
// runs only at the masked positions: their rows are gathered from the encoder's output first, so the
// projection onto the vocabulary costs M x dim x V for M masked tokens, not B x T x dim x V.
#pragma once
#include <cstdint>
#include <memory>

#include "core/random.h"
#include "core/tensor.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/transformer.h"

namespace ember::imdb {

class MaskedTokenModel : public nn::Module {
 public:
  // config.vocab_size counts [MASK] too (the training vocabulary's size + 1).
  MaskedTokenModel(const nn::ClassifierConfig& config, Generator& gen);

  struct Output {
    Tensor loss;     // mean cross-entropy over the masked positions (float32 scalar, differentiable)
    Tensor correct;  // how many of them the model predicts exactly (float64 scalar, on the model's device)
    Tensor logits;   // [M, vocab_size]: the head's output at the masked positions
  };
  // tokens int64 [B, T] (masked), key_padding_mask bool [B, T] (true = padding), positions int64 [M]
  // (row * T + column, each in [0, B T)), targets int64 [M] (the original tokens there); M >= 1.
  Output forward(const Tensor& tokens, const Tensor& key_padding_mask, const Tensor& positions,
                 const Tensor& targets) const;

  nn::ClassifierConfig config;
  // The encoder's parts are registered on this module under the classifier's names (token_embedding,
  // position_embedding, blocks.N, final_norm); its classification head is not (pretraining leaves it out).
  std::shared_ptr<nn::TransformerClassifier> encoder;
  std::shared_ptr<nn::Linear> mlm_dense;
  std::shared_ptr<nn::LayerNorm> mlm_norm;
  nn::Parameter mlm_bias;  // [vocab_size]
};

}  // namespace ember::imdb
