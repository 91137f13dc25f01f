// An encoder-decoder Transformer (Vaswani et al. 2017, pre-LN), the model of translation and summarisation:
// the encoder reads the source, the decoder writes the target one token at a time, attending to what it has
// written (causal self-attention) and to the encoder's output (cross-attention).
//
//   source ids [B, S] -> token + position embeddings -> encoder blocks -> LN -> memory [B, S, D]
//   target ids [B, T] -> token + position embeddings -> decoder blocks (memory) -> LN -> logits [B, T, V]
//
// Id 0 is padding in both (its keys are masked). Training feeds the target shifted right (teacher forcing:
// decode(bos t1 t2 ...) predicts t1 t2 ... eos); generation (greedy_decode) feeds back its own tokens, with the
// decoder's keys and values cached (nn/decoder.h) so that each step costs one position, not all so far.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/decoder.h"
#include "nn/transformer.h"

namespace ember::nn {

struct EncoderDecoderConfig {
  int64_t source_vocab = 0;
  int64_t target_vocab = 0;
  int64_t max_len = 64;  // the longest source and target, in tokens (the learned positions)
  int64_t dim = 128;
  int64_t heads = 4;
  int64_t encoder_layers = 2;
  int64_t decoder_layers = 2;
  int64_t ffn_dim = 512;
  double dropout = 0.1;
};

class EncoderDecoder : public Module {
 public:
  EncoderDecoder(const EncoderDecoderConfig& config, Generator& gen);

  // source [B, S] -> memory [B, S, D].
  Tensor encode(const Tensor& source) const;
  // target [B, T] (the decoder's input) -> logits [B, T, target_vocab], attending to memory (from source).
  Tensor decode(const Tensor& target, const Tensor& memory, const Tensor& source) const;
  Tensor forward(const Tensor& source, const Tensor& target) const { return decode(target, encode(source), source); }

  // Incremental decoding (inference: NoGradGuard): the logits [B, T_new, V] of the new target positions, which
  // follow the caches' earlier ones. Equal to decode()'s at those positions.
  struct Generation {
    Tensor memory, source_padding;
    std::vector<DecoderCache> caches;  // one per decoder block
    int64_t length = 0;                // target positions so far
  };
  Generation start(const Tensor& source) const;
  Tensor decode_step(const Tensor& new_target, Generation& state) const;

  // Greedy decoding: from `bos`, the most likely next token (never padding, id 0) until `eos` or max_new tokens;
  // [B, n] (the tokens after bos; 0 after a sequence's eos).
  Tensor greedy_decode(const Tensor& source, int64_t bos, int64_t eos, int64_t max_new) const;

  EncoderDecoderConfig config;
  std::shared_ptr<Embedding> source_embedding, target_embedding, source_positions, target_positions;
  std::shared_ptr<Dropout> source_dropout, target_dropout;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> encoder;
  std::vector<std::shared_ptr<TransformerDecoderLayer>> decoder;
  std::shared_ptr<LayerNorm> encoder_norm, decoder_norm;
  std::shared_ptr<Linear> head;

 private:
  Tensor embed_target(const Tensor& target, int64_t first_position) const;
};

}  // namespace ember::nn
