// What the emulator's training-step checks share (graph_train_step_test.cpp, prefetch_test.cpp): the
// recipe's model at small sizes, and batches of reviews as the trainer's Batcher makes them.
#pragma once
#include <cstdint>

#include "examples/imdb/batcher.h"
#include "nn/transformer.h"

namespace ember::emulator_checks {

// The recipe's model but for its sizes: 4 heads, 2 layers, dropout 0.1.
inline nn::ClassifierConfig small_recipe() {
  nn::ClassifierConfig config;
  config.vocab_size = 300;
  config.max_len = 64;
  config.dim = 32;
  config.heads = 4;
  config.layers = 2;
  config.ffn_dim = 64;
  config.dropout = 0.1;
  return config;
}

// A batch of B reviews of at most `longest` tokens (the first that long, some shorter), as the Batcher
// makes them; `seed` varies the tokens and lengths, and review r's label is (r + label_shift) % 2.
inline imdb::Batch make_batch(int64_t B, int64_t longest, int64_t vocab, int seed, int label_shift) {
  imdb::Batch b;
  b.batch = B;
  b.seq_len = longest;
  b.tokens.assign(size_t(B * longest), 0);
  b.key_mask.assign(size_t(B * longest), 0);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t length = r == 0 ? longest : 1 + (r * 7 + seed) % longest;
    for (int64_t t = 0; t < length; ++t) {
      b.tokens[size_t(r * longest + t)] = 1 + (r * 131 + t * 17 + seed * 5) % (vocab - 1);
      b.key_mask[size_t(r * longest + t)] = 1;
    }
    b.labels.push_back((r + label_shift) % 2);
    b.real_tokens += length;
  }
  return b;
}

}  // namespace ember::emulator_checks
