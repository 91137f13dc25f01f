// nn/ngrams.h and the classifier's hashed bigram embeddings (ClassifierConfig::bigram_buckets): the ids (each
// the hash of its n-gram, stable across runs and machines; a bigram's the n-gram hash of its pair, or for the
// first bigram models the pair hash), the model starting as the one without them, the gradient reaching a
// pair's row from the positions that hold it, gradcheck, and errors.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/ngrams.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("bigrams: each position holds its pair's id, the first the pair ([PAD], first token)") {
  const Tensor tokens = from_vector(std::vector<int64_t>{5, 9, 5, 9, 0, 7, 5, 9, 2, 2}, {2, 5});
  const Tensor ids = nn::hashed_bigrams(tokens, 1000);
  CHECK(ids.shape() == Shape({2, 5}));
  CHECK(ids.dtype() == Dtype::Int64);
  const std::vector<int64_t> got = ids.to_vector<int64_t>();
  const std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 5}, {5, 9}, {9, 5}, {5, 9}, {9, 0},
                                                          {0, 7}, {7, 5}, {5, 9}, {9, 2}, {2, 2}};
  for (size_t i = 0; i < pairs.size(); ++i) {
    INFO("position " << i);
    CHECK(got[i] == nn::bigram_id(pairs[i].first, pairs[i].second, 1000));
    CHECK(got[i] >= 0);
    CHECK(got[i] < 1000);
  }
  CHECK(got[1] == got[3]);  // the same pair, the same id, wherever it is
  CHECK(got[1] == got[7]);
  CHECK(got[1] != got[2]);  // (5, 9) and (9, 5) are different pairs (here, no collision either)
  // Zero-size batches and one bucket.
  CHECK(nn::hashed_bigrams(zeros({0, 4}, Dtype::Int64), 8).shape() == Shape({0, 4}));
  CHECK(nn::hashed_bigrams(zeros({3, 0}, Dtype::Int64), 8).shape() == Shape({3, 0}));
  CHECK(nn::hashed_bigrams(tokens, 1).to_vector<int64_t>() == std::vector<int64_t>(10, 0));
  // A non-contiguous view reads its own elements.
  const Tensor transposed = tokens.view({5, 2}).transpose(0, 1);  // rows 5 5 0 5 2 / 9 9 7 9 2
  CHECK(nn::hashed_bigrams(transposed, 1000).to_vector<int64_t>()[1] == nn::bigram_id(5, 5, 1000));
}

TEST_CASE("bigrams: ids spread evenly over the buckets, and are the same on every machine") {
  // 200 x 200 pairs into 64 buckets: 625 each on average; a fair hash keeps each within 20% of that.
  std::map<int64_t, int64_t> counts;
  for (int64_t a = 0; a < 200; ++a)
    for (int64_t b = 0; b < 200; ++b) ++counts[nn::bigram_id(a, b, 64)];
  CHECK(counts.size() == 64);
  for (const auto& [bucket, count] : counts) {
    INFO("bucket " << bucket);
    CHECK(std::abs(count - 625) < 125);
  }
  // A saved model's bigram rows (and an NBSVM's weights) are only meaningful under the same hash: these ids are
  // pinned (computed apart from this code, by a Python transcription of core/random.h's splitmix64: the chain from
  // (0x9A3F5, n) over the tokens; the first bigram models' over (0xB16A3, a << 32 ^ b)), so a change of either
  // function, which would silently scramble every trained model's pairs, fails here.
  const int64_t words[3] = {5, 6, 7};
  CHECK(nn::ngram_id(words, 1, 1 << 23) == 7724394);
  CHECK(nn::ngram_id(words, 2, 1 << 23) == 7046120);
  CHECK(nn::ngram_id(words, 3, 1 << 23) == 4495614);
  CHECK(nn::bigram_id(0, 0, 131072) == 41922);
  CHECK(nn::bigram_id(17, 4242, 131072) == 20408);
  CHECK(nn::bigram_id(20001, 3, 131072) == 73598);
  CHECK(nn::bigram_id(5, 9, 1000) == 430);
  CHECK(nn::bigram_id(5, 9, 1000) == nn::ngram_id(std::vector<int64_t>{5, 9}.data(), 2, 1000));  // one hash
  const nn::BigramHash first = nn::BigramHash::pair;
  CHECK(nn::bigram_id(0, 0, 131072, first) == 122633);
  CHECK(nn::bigram_id(17, 4242, 131072, first) == 58371);
  CHECK(nn::bigram_id(20001, 3, 131072, first) == 86339);
  CHECK(nn::bigram_id(5, 9, 1000, first) == 255);
  const Tensor tokens = from_vector(std::vector<int64_t>{5, 9, 0, 7}, {2, 2});
  const std::vector<int64_t> ids = nn::hashed_bigrams(tokens, 1000, first).to_vector<int64_t>();
  CHECK(ids == std::vector<int64_t>{nn::bigram_id(0, 5, 1000, first), 255, nn::bigram_id(0, 0, 1000, first),
                                    nn::bigram_id(0, 7, 1000, first)});
}

TEST_CASE("bigrams: bad tokens and bucket counts are refused") {
  check_error([] { nn::hashed_bigrams(from_vector(std::vector<int64_t>{1, -3}, {1, 2}), 10); },
              "token -3 at [0, 1] is negative");
  check_error([] { nn::hashed_bigrams(zeros({2, 2}, Dtype::Int64), 0); }, "buckets must be >= 1, got 0");
  check_error([] { nn::hashed_bigrams(zeros({4}, Dtype::Int64), 10); }, "tokens must be int64 [B, T], got int64 [4]");
  check_error([] { nn::hashed_bigrams(zeros({2, 2}, Dtype::Float32), 10); }, "tokens must be int64 [B, T], got float32");
  nn::ClassifierConfig config{12, 6, 4, 2, 1, 8, 2, 0.0};
  config.bigram_buckets = -1;
  Generator gen(1);
  check_error([&] { nn::TransformerClassifier model(config, gen); }, "bigram_buckets must be >= 0, got -1");
}

DEVICE_TEST_CASE("bigrams: the classifier starts as the one without them; a pair's row gets its positions' gradient") {
  nn::ClassifierConfig plain_config{30, 8, 8, 2, 2, 16, 2, 0.0};
  nn::ClassifierConfig config = plain_config;
  config.bigram_buckets = 64;
  Generator gen_plain(4), gen(4);
  nn::TransformerClassifier plain(plain_config, gen_plain), model(config, gen);
  plain.to(device);
  model.to(device);
  CHECK(model.state_dict().size() == plain.state_dict().size() + 1);
  CHECK(gen.offset() == gen_plain.offset());  // the zeros drew nothing
  const Tensor tokens = from_vector(std::vector<int64_t>{3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 0, 0}, {2, 8});
  const Tensor pad = eq(tokens, zeros({1}, Dtype::Int64)).to(device);
  const Tensor labels = from_vector(std::vector<int64_t>{1, 0});
  const Tensor plain_logits = plain.forward(tokens, pad), logits = model.forward(tokens, pad);
  CHECK(logits.to(Device::cpu()).to_vector<float>() == plain_logits.to(Device::cpu()).to_vector<float>());

  cross_entropy(model.forward(tokens, pad), labels).backward();
  const std::vector<float> bigram_grad = model.bigram_embedding->weight.grad().to(Device::cpu()).to_vector<float>();
  const std::vector<float> token_grad = model.token_embedding->weight.grad().to(Device::cpu()).to_vector<float>();
  const std::vector<int64_t> ids = nn::hashed_bigrams(tokens, 64).to_vector<int64_t>();
  const std::vector<int64_t> words = tokens.to_vector<int64_t>();
  std::map<int64_t, int> id_uses, word_uses;
  for (size_t i = 0; i < ids.size(); ++i) {
    ++id_uses[ids[i]];
    ++word_uses[words[i]];
  }
  int compared = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (id_uses[ids[i]] != 1 || word_uses[words[i]] != 1) continue;  // a row shared by two positions
    // The embeddings are summed: the pair's row and the word's row get the same gradient, that position's.
    for (int64_t d = 0; d < 8; ++d)
      CHECK(bigram_grad[size_t(ids[i] * 8 + d)] == doctest::Approx(token_grad[size_t(words[i] * 8 + d)]).epsilon(1e-5));
    ++compared;
  }
  CHECK(compared >= 8);
  for (int64_t id = 0; id < 64; ++id) {
    if (id_uses.count(id) != 0) continue;
    for (int64_t d = 0; d < 8; ++d) CHECK(bigram_grad[size_t(id * 8 + d)] == 0.0f);  // no position holds it
  }
}

TEST_CASE("gradcheck: the classifier with bigram embeddings (their rows set away from zero)") {
  nn::ClassifierConfig config{12, 6, 4, 2, 1, 8, 2, 0.0};
  config.bigram_buckets = 5;
  Generator gen(13);
  nn::TransformerClassifier model(config, gen);
  model.to(Dtype::Float64);
  {
    NoGradGuard no_grad;
    model.bigram_embedding->weight.copy_(random64({5, 4}, 3) * 0.5);
  }
  const Tensor tokens = from_vector(std::vector<int64_t>{3, 5, 7, 0, 2, 2, 9, 11}, {2, 4});
  const Tensor pad = eq(tokens, zeros({1}, Dtype::Int64));
  const Tensor labels = from_vector(std::vector<int64_t>{1, 0});
  std::vector<Tensor> params = model.parameters();
  check_gradient([&](const std::vector<Tensor>&) { return cross_entropy(model.forward(tokens, pad), labels); }, params);
}
