// The encoder-decoder Transformer: embeddings, the two stacks, the output head, and greedy decoding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/seq2seq.h"

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/shape.h"

namespace ember::nn {

namespace {
// bool [B, L], true where the id is 0 (padding).
Tensor padding_of(const Tensor& ids) { return eq(ids, zeros({1}, ids.dtype(), ids.device())); }

void check_ids(const char* what, const Tensor& ids, int64_t vocab, int64_t max_len, int64_t first = 0) {
  EMBER_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == Dtype::Int64,
              "EncoderDecoder: {} ids must be int64 [B, L], got {}", what,
              ids.defined() ? std::string(dtype_name(ids.dtype())) + " " + shape_str(ids.shape()) : "undefined");
  EMBER_CHECK(first + ids.size(1) <= max_len, "EncoderDecoder: {} length {} exceeds max_len {}", what,
              first + ids.size(1), max_len);
  (void)vocab;  // the embedding checks each id against its table
}
}  // namespace

EncoderDecoder::EncoderDecoder(const EncoderDecoderConfig& c, Generator& gen) : config(c) {
  EMBER_CHECK(c.source_vocab > 0 && c.target_vocab > 0 && c.max_len > 0 && c.encoder_layers >= 0 &&
                  c.decoder_layers > 0,
              "EncoderDecoder: vocabularies, max_len and the decoder's layers must be positive, got source_vocab {}, "
              "target_vocab {}, max_len {}, encoder_layers {}, decoder_layers {}",
              c.source_vocab, c.target_vocab, c.max_len, c.encoder_layers, c.decoder_layers);
  source_embedding = register_module("source_embedding", std::make_shared<Embedding>(c.source_vocab, c.dim, gen));
  source_positions = register_module("source_positions", std::make_shared<Embedding>(c.max_len, c.dim, gen));
  target_embedding = register_module("target_embedding", std::make_shared<Embedding>(c.target_vocab, c.dim, gen));
  target_positions = register_module("target_positions", std::make_shared<Embedding>(c.max_len, c.dim, gen));
  source_dropout = register_module("source_dropout", std::make_shared<Dropout>(c.dropout, gen));
  target_dropout = register_module("target_dropout", std::make_shared<Dropout>(c.dropout, gen));
  for (int64_t i = 0; i < c.encoder_layers; ++i)
    encoder.push_back(register_module("encoder." + std::to_string(i),
                                      std::make_shared<TransformerEncoderLayer>(c.dim, c.heads, c.ffn_dim, c.dropout, gen)));
  for (int64_t i = 0; i < c.decoder_layers; ++i)
    decoder.push_back(register_module("decoder." + std::to_string(i),
                                      std::make_shared<TransformerDecoderLayer>(c.dim, c.heads, c.ffn_dim, c.dropout, gen)));
  encoder_norm = register_module("encoder_norm", std::make_shared<LayerNorm>(c.dim));
  decoder_norm = register_module("decoder_norm", std::make_shared<LayerNorm>(c.dim));
  head = register_module("head", std::make_shared<Linear>(c.dim, c.target_vocab, gen));
}

Tensor EncoderDecoder::encode(const Tensor& source) const {
  auto scope = forward_scope();
  check_ids("source", source, config.source_vocab, config.max_len);
  const int64_t S = source.size(1);
  Tensor positions = arange(S).view({1, S}).to(source.device());
  Tensor x = source_dropout->forward(source_embedding->forward(source) + source_positions->forward(positions));
  const Tensor padding = padding_of(source);
  for (const auto& block : encoder) x = block->forward(x, padding);
  return encoder_norm->forward(x);
}

Tensor EncoderDecoder::embed_target(const Tensor& target, int64_t first_position) const {
  check_ids("target", target, config.target_vocab, config.max_len, first_position);
  const int64_t T = target.size(1);
  Tensor positions = arange(first_position, first_position + T).view({1, T}).to(target.device());
  return target_dropout->forward(target_embedding->forward(target) + target_positions->forward(positions));
}

Tensor EncoderDecoder::decode(const Tensor& target, const Tensor& memory, const Tensor& source) const {
  auto scope = forward_scope();
  Tensor x = embed_target(target, 0);
  const Tensor source_padding = padding_of(source), target_padding = padding_of(target);
  for (const auto& block : decoder) x = block->forward(x, memory, target_padding, source_padding);
  return head->forward(decoder_norm->forward(x));
}

EncoderDecoder::Generation EncoderDecoder::start(const Tensor& source) const {
  Generation state;
  state.memory = encode(source);
  state.source_padding = padding_of(source);
  state.caches.resize(decoder.size());
  return state;
}

Tensor EncoderDecoder::decode_step(const Tensor& new_target, Generation& state) const {
  auto scope = forward_scope();
  Tensor x = embed_target(new_target, state.length);
  for (size_t i = 0; i < decoder.size(); ++i)
    x = decoder[i]->forward_cached(x, state.memory, state.source_padding, state.caches[i], config.max_len);
  state.length += new_target.size(1);
  return head->forward(decoder_norm->forward(x));
}

Tensor EncoderDecoder::greedy_decode(const Tensor& source, int64_t bos, int64_t eos, int64_t max_new) const {
  NoGradGuard no_grad;
  EMBER_CHECK(max_new >= 0 && max_new < config.max_len, "EncoderDecoder::greedy_decode: max_new {} must be in [0, {})",
              max_new, config.max_len);
  const int64_t B = source.size(0);
  Generation state = start(source);
  std::vector<int64_t> next(size_t(B), bos), generated;
  std::vector<bool> done(size_t(B), false);
  int64_t steps = 0;
  for (; steps < max_new; ++steps) {
    Tensor logits = decode_step(from_vector(next, {B, 1}).to(source.device()), state);  // [B, 1, V]
    // The best token but padding (id 0, which the decoder never writes: a target's 0 is masked as a key).
    const std::vector<int64_t> best = argmax(logits.view({B, config.target_vocab}).narrow(1, 1, config.target_vocab - 1), 1)
                                          .to(Device::cpu())
                                          .to_vector<int64_t>();
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t token = best[size_t(b)] + 1;  // the narrowed logits start at id 1
      next[size_t(b)] = done[size_t(b)] ? 0 : token;
      done[size_t(b)] = done[size_t(b)] || token == eos;
      all_done = all_done && done[size_t(b)];
    }
    generated.insert(generated.end(), next.begin(), next.end());
    if (all_done) {
      ++steps;
      break;
    }
  }
  // generated is step-major [steps, B]: the result is its transpose.
  return from_vector(generated, {steps, B}).transpose(0, 1).contiguous();
}

}  // namespace ember::nn
