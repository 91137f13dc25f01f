// Several trained runs as one classifier (examples/imdb/ensemble.h): one run alone gives the trainer's own
// accuracy, two give the accuracy of their mean probability computed here by hand, runs of other settings
// (--bigrams, another --max-len) combine, and runs that held out other reviews are refused.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "examples/imdb/ensemble.h"
#include "examples/imdb/trainer.h"
#include "nn/checkpoint.h"
#include "nn/ngrams.h"
#include "tests/helpers.h"
#include "tests/imdb_helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;
using ember::testing::counted_accuracy;

namespace {

TrainConfig validated_run(const std::string& name, uint64_t seed) {
  TrainConfig c = ember::testing::tiny_train_config("ember_ensemble", name);
  c.epochs = 2;
  c.validation = 40;
  c.seed = seed;
  return c;
}

}  // namespace

TEST_CASE("accuracy_of: positive above one half, a tie negative (as argmax); counts that differ refused") {
  CHECK(accuracy_of({0.5, 0.6, 0.2, 0.9}, {1, 1, 0, 0}) == 0.5);  // 0.5 reads negative: wrong; 0.9 wrong
  CHECK(accuracy_of({0.51, 0.49}, {1, 0}) == 1.0);
  CHECK(accuracy_of({}, {}) == 0.0);
  check_error([] { accuracy_of({0.7}, {1, 0}); }, "1 probabilities for 2 labels");
}

TEST_CASE("ensemble: one run gives the trainer's accuracy; two, their mean probability's; other settings combine") {
  const TrainConfig a = validated_run("a", 1);
  TrainConfig b = validated_run("b", 2);
  b.model.bigram_buckets = 50;  // another model: its own input features
  b.model.max_len = 32;         // and its own truncation
  const RunResult ra = train_classifier(a), rb = train_classifier(b);
  TrainConfig data;
  data.data = a.data;
  const EnsembleResult alone = evaluate_ensemble({a.out}, data, /*validation=*/true);
  CHECK(alone.reviews == 40);
  CHECK(alone.accuracy == ra.epochs.back().validation_accuracy);  // the trainer's last evaluation, exactly
  CHECK(evaluate_ensemble({a.out}, data, false).accuracy == ra.final_test_accuracy);

  const EnsembleResult both = evaluate_ensemble({a.out, b.out}, data, true);
  REQUIRE(both.run_accuracies.size() == 2);
  CHECK(both.run_accuracies[0] == ra.epochs.back().validation_accuracy);
  CHECK(both.run_accuracies[1] == rb.epochs.back().validation_accuracy);
  // By hand: each model's probabilities on the reviews it reads (its own vocabulary and length), averaged.
  std::vector<double> mean(40, 0.0);
  std::vector<int> labels;
  for (const std::string& folder : {a.out, b.out}) {
    SavedRun run = load_run(folder);
    run.config.data = a.data;  // (not a setting a run keeps)
    const Data d = prepare_data(run.config, &run.vocabulary);
    labels = d.validation_labels;
    const std::vector<double> p = positive_probabilities(*run.model, d.validation_tokens);
    REQUIRE(p.size() == 40);
    for (size_t i = 0; i < p.size(); ++i) mean[i] += p[i] / 2;
  }
  CHECK(both.accuracy == counted_accuracy(mean, labels));
  // predict: the mean of the runs' probabilities.
  const std::vector<EnsembleMember> runs = {load_member(a.out), load_member(b.out)};
  const std::string review = "a wonderful film with a terrible ending";
  CHECK(predict_ensemble(runs, review) ==
        doctest::Approx((predict_positive(*runs[0].transformer, review) + predict_positive(*runs[1].transformer, review)) /
                        2).epsilon(1e-12));
}

TEST_CASE("ensemble: runs that held out other reviews, or none, are refused on the validation split") {
  const TrainConfig a = validated_run("held-40", 3);
  TrainConfig other = validated_run("held-20", 3);
  other.validation = 20;
  TrainConfig none = validated_run("held-none", 3);
  none.validation = 0;
  none.epochs = 1;
  train_classifier(a);
  train_classifier(other);
  train_classifier(none);
  TrainConfig data;
  data.data = a.data;
  check_error([&] { evaluate_ensemble({a.out, other.out}, data, true); },
              "held out --validation 20 of --limit 0, the first run --validation 40 of --limit 0");
  check_error([&] { evaluate_ensemble({a.out, none.out}, data, true); }, "held out no validation reviews");
  check_error([&] { evaluate_ensemble({a.out, a.out + "/missing"}, data, true); }, "missing");
  CHECK(evaluate_ensemble({a.out, other.out, none.out}, data, false).run_accuracies.size() == 3);  // test: all read it
}

// The one n-gram hash (nn/ngrams.h): a bigram model records it ("bigram_hash": "ngram"); a model file written
// before it has no such key and was trained on the first bigram models' pair hash, which it keeps: loaded, it
// reads its pairs' rows by that hash (its predictions as they were), not by the new one.
TEST_CASE("bigrams: a model file records its bigram hash; one from before the one hash keeps its pair hash") {
  TrainConfig c = validated_run("hash", 3);
  c.model.bigram_buckets = 50;
  train_classifier(c);
  const std::string path = c.out + "/model.safetensors";
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_tensors(path, &meta);
  CHECK(meta.at("bigram_hash") == "ngram");
  SavedRun now = load_run(c.out);
  CHECK(now.config.model.bigram_hash == nn::BigramHash::ngram);
  now.config.data = c.data;
  const Data data = prepare_data(now.config, &now.vocabulary);
  const std::vector<double> by_ngram = positive_probabilities(*now.model, data.validation_tokens);

  meta.erase("bigram_hash");  // as a build before the one hash wrote it
  meta[kContentKey] = content_fingerprint(tensors, meta);
  nn::save_tensors(path, tensors, meta);
  SavedRun old = load_run(c.out);
  CHECK(old.config.model.bigram_hash == nn::BigramHash::pair);
  const std::vector<double> by_pair = positive_probabilities(*old.model, data.validation_tokens);
  CHECK(by_pair != by_ngram);  // the same weights read by other rows
  // The pair hash's rows, by hand: the model with its config's hash switched gives the other's numbers.
  old.model->config.bigram_hash = nn::BigramHash::ngram;
  CHECK(positive_probabilities(*old.model, data.validation_tokens) == by_ngram);
  // A model without bigrams records no hash: its file is as before the one hash.
  TrainConfig plain = validated_run("no-hash", 3);
  train_classifier(plain);
  nn::Metadata plain_meta;
  nn::load_tensors(plain.out + "/model.safetensors", &plain_meta);
  CHECK(plain_meta.count("bigram_hash") == 0);
}
