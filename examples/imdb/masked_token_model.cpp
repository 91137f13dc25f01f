// The masked-token model: the classifier's encoder, the rows at the masked positions, BERT's head.
#include "examples/imdb/masked_token_model.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace ember::imdb {

MaskedTokenModel::MaskedTokenModel(const nn::ClassifierConfig& config_in, Generator& gen) : config(config_in) {
  encoder = std::make_shared<nn::TransformerClassifier>(config, gen);
  register_module("token_embedding", encoder->token_embedding);
  register_module("position_embedding", encoder->position_embedding);
  register_module("embedding_dropout", encoder->embedding_dropout);
  for (size_t i = 0; i < encoder->blocks.size(); ++i) register_module("blocks." + std::to_string(i), encoder->blocks[i]);
  register_module("final_norm", encoder->final_norm);
  mlm_dense = register_module("mlm_dense", std::make_shared<nn::Linear>(config.dim, config.dim, gen));
  mlm_norm = register_module("mlm_norm", std::make_shared<nn::LayerNorm>(config.dim));
  mlm_bias = register_parameter("mlm_bias", zeros({config.vocab_size}));
}

MaskedTokenModel::Output MaskedTokenModel::forward(const Tensor& tokens, const Tensor& key_padding_mask,
                                                   const Tensor& positions, const Tensor& targets) const {
  auto scope = forward_scope();
  EMBER_CHECK(positions.dim() == 1 && positions.numel() >= 1 && targets.shape() == positions.shape(),
              "MaskedTokenModel: positions [M] and targets [M] with M >= 1, got {} and {}", shape_str(positions.shape()),
              shape_str(targets.shape()));
  Tensor hidden = encoder->encode(tokens, key_padding_mask);  // [B, T, D]
  const int64_t rows = hidden.size(0) * hidden.size(1);
  // The masked rows alone ([M, D]): the embedding op is a row gather whose backward scatters into `hidden`.
  Tensor picked = embedding(hidden.reshape({rows, config.dim}), positions);
  Tensor h = mlm_norm->forward(gelu(mlm_dense->forward(picked)));
  Output out;
  out.logits = linear(h, encoder->token_embedding->weight, mlm_bias);  // tied: h @ E^T + b, [M, V]
  out.loss = cross_entropy(out.logits, targets);
  NoGradGuard no_grad;
  Tensor predicted = argmax(out.logits.detach(), 1);
  out.correct = sum(eq(predicted, targets.to(predicted.device())).to(Dtype::Float64));
  return out;
}

}  // namespace ember::imdb
