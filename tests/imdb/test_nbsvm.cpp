// NBSVM (examples/imdb/nbsvm.h, ngram_features.h): n-gram sets and naive-Bayes ratios against numbers worked
// by hand, the score's value and float64 gradient, a training run on the bundled reviews that learns, its file
// read back (and refused when damaged, mismatched or about to be overwritten), and NBSVM in an ensemble.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "examples/imdb/ensemble.h"
#include "examples/imdb/nbsvm.h"
#include "examples/imdb/ngram_features.h"
#include "examples/imdb/trainer.h"
#include "nn/ngrams.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;
using ember::testing::counted_accuracy;
using ember::testing::check_values;

namespace {

NbsvmConfig small_nbsvm(const std::string& name) {
  NbsvmConfig c;
  const TrainConfig tiny = ember::testing::tiny_train_config("ember_nbsvm", name);
  c.run.data = tiny.data;
  c.run.out = tiny.out;
  c.run.quiet = true;
  c.run.epochs = 4;
  c.run.lr = 0.05;
  c.run.batch_size = 16;
  c.buckets = 1 << 16;
  return c;
}

std::vector<int32_t> sorted_ids(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

}  // namespace

TEST_CASE("nbsvm: a review's n-gram set holds each of its 1..order-grams once, sorted") {
  const int64_t buckets = int64_t(1) << 30;
  const std::vector<int32_t> tokens = {5, 6, 5, 6};  // words 5, 6; pairs (5 6), (6 5); triples (5 6 5), (6 5 6)
  auto id = [&](std::vector<int64_t> gram) { return nn::ngram_id(gram.data(), int64_t(gram.size()), buckets); };
  CHECK(ngram_set(tokens, 1, buckets) == sorted_ids({id({5}), id({6})}));
  CHECK(ngram_set(tokens, 2, buckets) == sorted_ids({id({5}), id({6}), id({5, 6}), id({6, 5})}));
  const std::vector<int32_t> three = ngram_set(tokens, 3, buckets);
  CHECK(three == sorted_ids({id({5}), id({6}), id({5, 6}), id({6, 5}), id({5, 6, 5}), id({6, 5, 6})}));
  CHECK(three.size() == 6);  // 2^30 buckets: these six do not collide
  // The id is the n-gram's, wherever it stands; a word and the pair it starts are different n-grams.
  const std::vector<int64_t> wide(tokens.begin(), tokens.end());
  CHECK(id({5, 6}) == nn::ngram_id(wide.data() + 2, 2, buckets));
  CHECK(id({5}) != id({5, 6}));
  // The ids are fixed (nn::ngram_id, tests/nn/test_ngrams.cpp): a saved NBSVM's weights are indexed by them, so a
  // change of the hash would make every saved model read the wrong weights. These are the ids its files were
  // written with.
  const std::vector<int64_t> words = {5, 6, 7};
  CHECK(nn::ngram_id(words.data(), 1, 1 << 23) == 7724394);
  CHECK(nn::ngram_id(words.data(), 2, 1 << 23) == 7046120);
  CHECK(nn::ngram_id(words.data(), 3, 1 << 23) == 4495614);
  // Edges: no tokens, no n-gram; an order past the length stops at the length; one bucket holds everything.
  CHECK(ngram_set({}, 3, buckets).empty());
  CHECK(ngram_set({7}, 3, buckets) == std::vector<int32_t>{int32_t(id({7}))});
  CHECK(ngram_set(tokens, 3, 1) == std::vector<int32_t>{0});
  check_error([&] { ngram_set(tokens, 0, buckets); }, "order must be >= 1");
  check_error([&] { ngram_set(tokens, 2, 0); }, "buckets must be in [1, 2^31)");
  check_error([&] { ngram_set(tokens, 2, int64_t(1) << 31); }, "buckets must be in [1, 2^31)");
}

TEST_CASE("nbsvm: the naive-Bayes log-count ratios of Wang and Manning, by hand") {
  // Review 0 (positive) has id 0; review 1 (negative) has id 1; alpha 1 over 3 buckets:
  // p = [2, 1, 1] (sum 4), q = [1, 2, 1] (sum 4): r = [log 2, -log 2, 0].
  check_values(from_vector(nb_log_count_ratios({{0}, {1}}, {1, 0}, 3, 1.0), {3}), {std::log(2.0), -std::log(2.0), 0.0});
  // Unbalanced: two positives with id 0, alpha 0.5 over 2 buckets: p = [2.5, 0.5] (sum 3), q = [0.5, 0.5] (sum 1);
  // r0 = log((2.5 / 3) / 0.5), r1 = log((0.5 / 3) / 0.5): an id no review has leans to the rarer class.
  check_values(from_vector(nb_log_count_ratios({{0}, {0}}, {1, 1}, 2, 0.5), {2}),
               {std::log(2.5 / 3 / 0.5), std::log(0.5 / 3 / 0.5)});
  CHECK(nb_log_count_ratios({}, {}, 4, 1.0) == std::vector<float>(4, 0.0f));  // no reviews: no evidence
  check_error([] { nb_log_count_ratios({{0}}, {2}, 3, 1.0); }, "label 2, not 0 or 1");
  check_error([] { nb_log_count_ratios({{3}}, {1}, 3, 1.0); }, "id 3 outside [0, 3)");
  check_error([] { nb_log_count_ratios({{-1}}, {1}, 3, 1.0); }, "id -1 outside [0, 3)");
  check_error([] { nb_log_count_ratios({{0}}, {1, 0}, 3, 1.0); }, "1 reviews but 2 labels");
  check_error([] { nb_log_count_ratios({{0}}, {1}, 3, 0.0); }, "alpha must be > 0");
  check_error([] { nb_log_count_ratios({{0}}, {1}, 3, NAN); }, "alpha must be > 0");
}

TEST_CASE("nbsvm: the score b + sum w[f] r[f], its value and float64 gradient") {
  const Tensor weight = from_vector(std::vector<double>{0.5, -1.0, 2.0}, {3, 1});
  const Tensor bias = from_vector(std::vector<double>{0.25}, {1});
  const std::vector<float> ratios = {1.0f, 2.0f, 3.0f};
  const std::vector<int32_t> both = {0, 2}, one = {1}, none = {};
  // 0.25 + 0.5 * 1 + 2 * 3; 0.25 - 1 * 2; an empty review: the bias alone.
  check_values(nbsvm_scores(weight, bias, ratios, {&both, &one, &none}), {6.75, -1.75, 0.25});
  CHECK(nbsvm_scores(weight, bias, ratios, {}).numel() == 0);  // no reviews
  ember::testing::check_gradient(
      [&](const std::vector<Tensor>& in) { return nbsvm_scores(in[0], in[1], ratios, {&both, &one, &none, &both}); },
      {ember::testing::random64({3, 1}, 1), ember::testing::random64({1}, 2)});
  const std::vector<int32_t> outside = {3};
  check_error([&] { nbsvm_scores(weight, bias, ratios, {&outside}); }, "n-gram id 3 outside [0, 3)");
  check_error([&] { nbsvm_scores(weight, bias, {1.0f}, {&both}); }, "1 ratios for 3 weights");
}

TEST_CASE("nbsvm: training learns the bundled reviews; the saved model gives the same probabilities") {
  NbsvmConfig c = small_nbsvm("learns");
  c.run.validation = 40;
  std::filesystem::remove_all(c.run.out);
  const NbsvmResult r = train_nbsvm(c);
  REQUIRE(r.epoch_losses.size() == 4);
  REQUIRE(r.validation_accuracies.size() == 4);
  CHECK(r.test_accuracy == -1);  // with --validation the test reviews are not evaluated
  CHECK(r.epoch_losses.back() < 0.5 * r.epoch_losses.front());  // (epoch 1: 0.14; the 160 reviews fitted by epoch 2)
  CHECK(r.epoch_losses.front() < std::log(2.0));                // below the untrained model's log 2
  CHECK(r.validation_accuracies.back() > 0.6);                  // 40 held-out reviews, chance 0.5 (it reads 0.775)
  REQUIRE(is_nbsvm_run(c.run.out));
  const NbsvmModel model = load_nbsvm(c.run.out);
  CHECK(model.config.order == 3);
  CHECK(model.config.buckets == c.buckets);
  CHECK(model.config.run.validation == 40);
  TrainConfig data_config = c.run;
  const Data data = prepare_data(data_config, &model.vocabulary);
  const std::vector<double> p = nbsvm_probabilities(model, data.validation_tokens);
  CHECK(counted_accuracy(p, data.validation_labels) == r.validation_accuracies.back());
  // The ratios are the training reviews' (not the held-out ones').
  std::vector<std::vector<int32_t>> sets;
  for (const auto& review : data.train_tokens) sets.push_back(ngram_set(review, 3, c.buckets));
  CHECK(model.ratios == nb_log_count_ratios(sets, data.train_labels, c.buckets, 1.0));
  // One review's text: the probability of its encoded tokens.
  const std::string review = "a wonderful film with a terrible ending";
  CHECK(nbsvm_predict(model, review) ==
        nbsvm_probabilities(model, {model.vocabulary.encode(review, 1 << 20)})[0]);
}

TEST_CASE("nbsvm: without --validation the test reviews are evaluated once, at the end") {
  NbsvmConfig c = small_nbsvm("test-split");
  c.run.epochs = 1;
  std::filesystem::remove_all(c.run.out);
  const NbsvmResult r = train_nbsvm(c);
  CHECK(r.validation_accuracies.empty());
  const NbsvmModel model = load_nbsvm(c.run.out);
  const Data data = prepare_data(c.run, &model.vocabulary);
  CHECK(r.test_accuracy == counted_accuracy(nbsvm_probabilities(model, data.test_tokens), data.test_labels));
}

TEST_CASE("nbsvm: a saved model is never overwritten, and a damaged or mismatched one is refused by name") {
  NbsvmConfig c = small_nbsvm("refused");
  c.run.epochs = 1;
  std::filesystem::remove_all(c.run.out);
  train_nbsvm(c);
  const std::string path = c.run.out + "/nbsvm.safetensors";
  const std::string saved = read_whole_file(path, "model");
  check_error([&] { train_nbsvm(c); }, "is never overwritten");
  CHECK(read_whole_file(path, "model") == saved);
  auto rewrite = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  rewrite(saved.substr(0, saved.size() / 2));  // half-written
  check_error([&] { load_nbsvm(c.run.out); }, path);
  std::string flipped = saved;
  flipped[flipped.size() - 5] ^= 0x01;  // one bit of the last tensor's bytes: only the checksum sees it
  rewrite(flipped);
  check_error([&] { load_nbsvm(c.run.out); }, "content");
  rewrite(saved);
  CHECK_NOTHROW(load_nbsvm(c.run.out));
  // Another run's vocabulary beside the model.
  const std::string vocab = read_whole_file(c.run.out + "/vocab.txt", "vocab");
  std::string other = vocab;
  other.replace(other.rfind('\n', other.size() - 2) + 1, std::string::npos, "zzzz\n");
  std::ofstream(c.run.out + "/vocab.txt", std::ios::trunc) << other;
  check_error([&] { load_nbsvm(c.run.out); }, "not the vocabulary the NBSVM was trained with");
  std::ofstream(c.run.out + "/vocab.txt", std::ios::trunc) << vocab;
  // A Transformer's folder is not an NBSVM's, and an NBSVM does not go into one.
  TrainConfig transformer = ember::testing::tiny_train_config("ember_nbsvm", "transformer");
  transformer.epochs = 1;
  std::filesystem::remove_all(transformer.out);
  train_classifier(transformer);
  CHECK_FALSE(is_nbsvm_run(transformer.out));
  NbsvmConfig into = c;
  into.run.out = transformer.out;
  check_error([&] { train_nbsvm(into); }, "holds a classifier's run (its model.safetensors)");
  check_error([&] { load_nbsvm(transformer.out); }, "nbsvm.safetensors");
  // Nor a Transformer into an NBSVM's folder (its vocab.txt would replace the NBSVM's): refused, nothing changed.
  TrainConfig onto = transformer;
  onto.out = c.run.out;
  check_error([&] { train_classifier(onto); }, "train: " + c.run.out + " holds an NBSVM");
  CHECK(read_whole_file(path, "model") == saved);
  CHECK(read_whole_file(c.run.out + "/vocab.txt", "vocab") == vocab);
  CHECK_NOTHROW(load_nbsvm(c.run.out));
  // Settings out of range.
  NbsvmConfig bad = c;
  bad.order = 0;
  check_error([&] { bad.validate(); }, "--ngrams must be in [1, 8]");
  bad = c;
  bad.l2 = -1;
  check_error([&] { bad.validate(); }, "--l2 must be >= 0");
  bad = c;
  bad.buckets = 0;
  check_error([&] { bad.validate(); }, "--buckets must be in");
}

TEST_CASE("nbsvm: in an ensemble beside a Transformer, the mean of the two probabilities") {
  NbsvmConfig nb = small_nbsvm("member");
  nb.run.validation = 40;
  std::filesystem::remove_all(nb.run.out);
  train_nbsvm(nb);
  TrainConfig transformer = ember::testing::tiny_train_config("ember_nbsvm", "member-transformer");
  transformer.validation = 40;
  transformer.epochs = 2;
  std::filesystem::remove_all(transformer.out);
  train_classifier(transformer);
  const EnsembleResult both = evaluate_ensemble({transformer.out, nb.run.out}, transformer, /*validation=*/true);
  const EnsembleMember a = load_member(transformer.out), b = load_member(nb.run.out);
  REQUIRE(a.transformer.has_value());
  REQUIRE(b.nbsvm.has_value());
  TrainConfig ca = a.config(), cb = b.config();
  ca.data = cb.data = transformer.data;  // (not a setting a run keeps)
  const Data da = prepare_data(ca, &a.vocabulary()), db = prepare_data(cb, &b.vocabulary());
  REQUIRE(da.validation_labels == db.validation_labels);  // the same held-out reviews, each encoded its own way
  const std::vector<double> pa = a.probabilities(da.validation_tokens), pb = b.probabilities(db.validation_tokens);
  std::vector<double> mean(pa.size());
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = (pa[i] + pb[i]) / 2;
  CHECK(both.accuracy == counted_accuracy(mean, da.validation_labels));
  CHECK(both.run_accuracies[1] == counted_accuracy(pb, db.validation_labels));
  const std::string review = "a wonderful film with a terrible ending";
  CHECK(predict_ensemble({a, b}, review) == doctest::Approx((a.predict(review) + b.predict(review)) / 2).epsilon(1e-12));
  // An NBSVM that held out other reviews is refused on the validation split.
  NbsvmConfig other = small_nbsvm("member-other");
  other.run.validation = 20;
  other.run.epochs = 1;
  std::filesystem::remove_all(other.run.out);
  train_nbsvm(other);
  check_error([&] { evaluate_ensemble({transformer.out, other.run.out}, transformer, true); }, "not the same reviews");
}
