// Hashed n-gram ids (nn/ngrams.h): chains of core/random.h's splitmix64, reduced to the buckets.
#include "nn/ngrams.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/random.h"
#include "core/shape.h"

namespace ember::nn {

int64_t ngram_id(const int64_t* tokens, int64_t n, int64_t buckets) {
  constexpr uint64_t kNgramSeed = 0x9A3F5;
  uint64_t hash = random_bits(kNgramSeed, uint64_t(n));
  for (int64_t i = 0; i < n; ++i) hash = random_bits(hash, uint64_t(uint32_t(tokens[i])));
  return int64_t(hash % uint64_t(buckets));
}

int64_t bigram_id(int64_t previous, int64_t token, int64_t buckets, BigramHash hash) {
  if (hash == BigramHash::ngram) {
    const int64_t pair[2] = {previous, token};
    return ngram_id(pair, 2, buckets);
  }
  // The first bigram models': a fixed stream (the seed) indexed by the pair.
  constexpr uint64_t kBigramSeed = 0xB16A3;
  const uint64_t pair = (uint64_t(previous) << 32) ^ uint64_t(token);
  return int64_t(random_bits(kBigramSeed, pair) % uint64_t(buckets));
}

Tensor hashed_bigrams(const Tensor& tokens, int64_t buckets, BigramHash hash) {
  EMBER_CHECK(buckets >= 1, "hashed_bigrams: buckets must be >= 1, got {}", buckets);
  EMBER_CHECK(tokens.defined(), "hashed_bigrams: tokens are undefined");
  EMBER_CHECK(tokens.dtype() == Dtype::Int64 && tokens.dim() == 2, "hashed_bigrams: tokens must be int64 [B, T], got {} {}",
              dtype_name(tokens.dtype()), shape_str(tokens.shape()));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const std::vector<int64_t> ids = tokens.detach().to(Device::cpu()).contiguous().to_vector<int64_t>();
  std::vector<int64_t> out(ids.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t token = ids[size_t(b * T + t)], previous = t == 0 ? 0 : ids[size_t(b * T + t - 1)];
      EMBER_CHECK(token >= 0, "hashed_bigrams: token {} at [{}, {}] is negative", token, b, t);
      out[size_t(b * T + t)] = bigram_id(previous, token, buckets, hash);
    }
  return from_vector(out, {B, T});
}

}  // namespace ember::nn
