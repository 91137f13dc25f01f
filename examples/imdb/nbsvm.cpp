// NBSVM (examples/imdb/nbsvm.h): features, training with Adam, the model file, prediction.
#include "examples/imdb/nbsvm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/parallel.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/ngram_features.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/trainer.h"
#include "examples/imdb/truncation.h"
#include "nn/checkpoint.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/loop.h"

namespace ember::imdb {

namespace {

constexpr const char* kNbsvmFormat = "ember-imdb-nbsvm-v1";
constexpr const char* kNbsvmFile = "/nbsvm.safetensors";

std::vector<std::vector<int32_t>> ngram_sets(const std::vector<std::vector<int32_t>>& reviews, const NbsvmConfig& c) {
  std::vector<std::vector<int32_t>> sets(reviews.size());
  parallel_for(0, int64_t(reviews.size()), 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) sets[size_t(r)] = ngram_set(reviews[size_t(r)], c.order, c.buckets);
  });
  return sets;
}

std::vector<double> probabilities_of_sets(const Tensor& weight, const Tensor& bias, const std::vector<float>& ratios,
                                          const std::vector<std::vector<int32_t>>& sets) {
  NoGradGuard no_grad;
  std::vector<double> out;
  out.reserve(sets.size());
  constexpr size_t kBatch = 256;
  for (size_t first = 0; first < sets.size(); first += kBatch) {
    std::vector<const std::vector<int32_t>*> batch;
    for (size_t r = first; r < std::min(sets.size(), first + kBatch); ++r) batch.push_back(&sets[r]);
    for (float z : nbsvm_scores(weight, bias, ratios, batch).to_vector<float>()) out.push_back(1.0 / (1.0 + std::exp(-double(z))));
  }
  return out;
}

nn::Metadata model_metadata(const NbsvmConfig& c, const Vocabulary& vocabulary) {
  nn::Metadata meta = c.run.to_metadata();
  meta["format"] = kNbsvmFormat;
  meta["ngram_order"] = std::to_string(c.order);
  meta["ngram_buckets"] = std::to_string(c.buckets);
  meta["nb_alpha"] = fmt::format("{}", c.alpha);
  meta["l2"] = fmt::format("{}", c.l2);
  meta["vocab_sha256"] = vocabulary_fingerprint(vocabulary);
  return meta;
}

}  // namespace

NbsvmConfig::NbsvmConfig() {
  run.model.max_len = limits::max_len;  // whole reviews: a feature costs one lookup, not attention
  run.vocab_words = 100000;             // every training word (83,187)
  run.epochs = 1;  // chosen on validation (docs/imdb.md): 1, 2 and 3 epochs read alike, one costs a third
  run.lr = 0.01;
  run.batch_size = 32;
  run.out = "runs/nbsvm";
}

void NbsvmConfig::validate() const {
  run.validate();
  EMBER_CHECK(order >= 1 && order <= 8, "--ngrams must be in [1, 8], got {}", order);
  EMBER_CHECK(buckets >= 1 && buckets <= limits::max_bigram_buckets, "--buckets must be in [1, {}], got {}",
              limits::max_bigram_buckets, buckets);
  EMBER_CHECK(alpha > 0 && std::isfinite(alpha), "--alpha must be > 0, got {}", alpha);
  EMBER_CHECK(l2 >= 0 && std::isfinite(l2), "--l2 must be >= 0, got {}", l2);
}

NbsvmFeatures nbsvm_features(const std::vector<float>& ratios, const std::vector<const std::vector<int32_t>*>& sets) {
  const int64_t buckets = int64_t(ratios.size());
  const int64_t B = int64_t(sets.size());
  size_t longest = 1;  // a review with no n-gram (empty) scores the bias alone
  for (const auto* set : sets) longest = std::max(longest, set->size());
  const int64_t L = int64_t(longest);
  // Padding: id 0 with value 0, which adds nothing to the score and nothing to weight 0's gradient.
  std::vector<int64_t> ids(size_t(B * L), 0);
  std::vector<float> values(size_t(B * L), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& set = *sets[size_t(b)];
    for (size_t j = 0; j < set.size(); ++j) {
      EMBER_CHECK(set[j] >= 0 && set[j] < buckets, "nbsvm_scores: n-gram id {} outside [0, {})", set[j], buckets);
      ids[size_t(b * L) + j] = set[j];
      values[size_t(b * L) + j] = ratios[size_t(set[j])];
    }
  }
  return {from_vector(ids, {B, L}), from_vector(values, {B, L})};
}

Tensor nbsvm_scores(const Tensor& weight, const Tensor& bias, const Tensor& ids, const Tensor& values) {
  const int64_t B = ids.size(0), L = ids.size(1);
  const Tensor picked = embedding(weight, ids).view({B, L});  // w[f] of each feature
  return sum(picked * values.to(weight.dtype()), {1}) + bias;  // (to float64 in a gradcheck)
}

Tensor nbsvm_scores(const Tensor& weight, const Tensor& bias, const std::vector<float>& ratios,
                    const std::vector<const std::vector<int32_t>*>& sets) {
  EMBER_CHECK(int64_t(ratios.size()) == weight.size(0), "nbsvm_scores: {} ratios for {} weights", ratios.size(),
              weight.size(0));
  const NbsvmFeatures features = nbsvm_features(ratios, sets);
  return nbsvm_scores(weight, bias, features.ids, features.values);
}

NbsvmResult train_nbsvm(const NbsvmConfig& c) {
  c.validate();
  if (c.run.threads > 0) set_num_threads(c.run.threads);
  const auto started = std::chrono::steady_clock::now();
  train::check_output_folder(c.run.out);
  train::RunLock lock(c.run.out);
  const std::string path = c.run.out + kNbsvmFile;
  // Nothing is written over another run (an NBSVM's included: nbsvm has no --resume) unless --overwrite.
  check_run_folder_kind(c.run.out, RunKind::nbsvm, "nbsvm", c.run.overwrite, false);
  check_run_files_writable(c.run.out, {"vocab.txt", "nbsvm.safetensors"});
  const Data data = prepare_data(c.run);
  EMBER_CHECK(!data.train_tokens.empty(), "nbsvm: there are no training reviews");
  const std::vector<std::vector<int32_t>> train_sets = ngram_sets(data.train_tokens, c);
  const std::vector<float> ratios = nb_log_count_ratios(train_sets, data.train_labels, c.buckets, c.alpha);
  if (!c.run.quiet)
    fmt::print("nbsvm: {} training reviews, 1-{}-grams in {} buckets, vocabulary {}\n", train_sets.size(), c.order,
               c.buckets, data.vocabulary.size());
  std::fflush(stdout);  // (a log file shows the line now)

  NbsvmWeights model(c.buckets);
  optim::Adam adam({{{model.weight}, c.l2, 1.0}, {{model.bias}, 0.0, 1.0}}, c.run.lr);  // coupled: l2 * w joins the gradient
  const int64_t count = int64_t(train_sets.size());
  const int64_t per_epoch = (count + c.run.batch_size - 1) / c.run.batch_size;
  const int64_t total = per_epoch * c.run.epochs;
  const std::vector<std::vector<int32_t>> validation_sets = ngram_sets(data.validation_tokens, c);
  std::vector<train::Evaluation> evaluations;  // validation every epoch; or test once, at the end
  const auto accuracy_on = [&](const std::vector<std::vector<int32_t>>& sets, const std::vector<int>& labels) {
    return accuracy_of(probabilities_of_sets(model.weight, model.bias, ratios, sets), labels);
  };
  if (!validation_sets.empty())
    evaluations.push_back({"validation_accuracy", [&] { return accuracy_on(validation_sets, data.validation_labels); },
                           /*every_epoch=*/true, /*percent=*/true});
  else
    evaluations.push_back({"test_accuracy", [&] { return accuracy_on(ngram_sets(data.test_tokens, c), data.test_labels); },
                           /*every_epoch=*/false, /*percent=*/true});
  // Linear decay of the rate to zero; no run folder of the loop's (the NBSVM file is this program's).
  train::Loop loop(model, adam, {.steps = total, .steps_per_epoch = per_epoch,
                                 .schedule = optim::Schedule{optim::ScheduleKind::WarmupLinear, c.run.lr, 0, total},
                                 .quiet = c.run.quiet, .evaluations = evaluations});
  std::vector<int64_t> order;  // the epoch's shuffle
  int64_t order_epoch = -1;
  const auto reviews = [&](const train::StepAt& at) {
    if (at.epoch != order_epoch) order = shuffled_order(count, c.run.seed, order_epoch = at.epoch);
    std::vector<const std::vector<int32_t>*> batch;
    std::vector<float> signs;  // +1 for a positive review, -1 for a negative one
    for (int64_t i = at.index * c.run.batch_size; i < std::min(count, (at.index + 1) * c.run.batch_size); ++i) {
      batch.push_back(&train_sets[size_t(order[size_t(i)])]);
      signs.push_back(data.train_labels[size_t(order[size_t(i)])] == 1 ? 1.0f : -1.0f);
    }
    const NbsvmFeatures features = nbsvm_features(ratios, batch);
    return train::Batch{{"ids", features.ids}, {"values", features.values},
                        {"signs", from_vector(signs, {int64_t(signs.size())})}};
  };
  const auto logistic_loss = [&](const train::Batch& batch) {  // log(1 + e^(-y z)), averaged over the batch
    const Tensor z = nbsvm_scores(model.weight, model.bias, batch.at("ids"), batch.at("values"));
    return sum(softplus(z * batch.at("signs") * -1.0)) * (1.0 / double(batch.at("signs").numel()));
  };
  const train::LoopResult trained = loop.run(reviews, logistic_loss);
  NbsvmResult result;
  for (const train::EpochResult& epoch : trained.epochs) {
    result.epoch_losses.push_back(epoch.train_loss);
    if (!validation_sets.empty()) result.validation_accuracies.push_back(epoch.evaluations.at("validation_accuracy"));
  }
  if (validation_sets.empty()) result.test_accuracy = trained.final_evaluations.at("test_accuracy");
  const Tensor& weight = model.weight;
  const Tensor& bias = model.bias;

  nn::TensorMap tensors{{"weight", weight.detach()}, {"bias", bias.detach()},
                        {"ratios", from_vector(ratios, {c.buckets})}};
  nn::check_all_finite(tensors, "nbsvm: the trained model");
  nn::Metadata meta = model_metadata(c, data.vocabulary);
  meta[kContentKey] = content_fingerprint(tensors, meta);
  if (c.run.overwrite) remove_run_files(c.run.out);  // what was there goes, before this run's first file
  data.vocabulary.save(c.run.out + "/vocab.txt");
  nn::save_tensors(path, tensors, meta);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

bool is_nbsvm_run(const std::string& folder) { return std::filesystem::exists(folder + kNbsvmFile); }

NbsvmModel load_nbsvm(const std::string& folder) {
  const std::string path = folder + kNbsvmFile;
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_weights(path, &meta);
  auto text = [&](const std::string& key) {
    auto it = meta.find(key);
    EMBER_CHECK(it != meta.end(), "NBSVM file '{}' has no '{}' in its metadata", path, key);
    return it->second;
  };
  EMBER_CHECK(text("format") == kNbsvmFormat, "NBSVM file '{}' has format '{}', expected {}", path,
              text("format").substr(0, 60), kNbsvmFormat);
  NbsvmConfig config;
  try {
    config.run = TrainConfig::from_metadata(meta);
    const auto order = parse_integer(text("ngram_order"), 1, 8);
    const auto buckets = parse_integer(text("ngram_buckets"), 1, limits::max_bigram_buckets);
    const auto alpha = parse_real(text("nb_alpha"), 1e-300, 1e300);
    const auto l2 = parse_real(text("l2"), 0, 1e300);
    EMBER_CHECK(order && buckets && alpha && l2, "a setting (ngram_order, ngram_buckets, nb_alpha, l2) is malformed "
                "or out of range");
    config.order = *order;
    config.buckets = *buckets;
    config.alpha = *alpha;
    config.l2 = *l2;
  } catch (const Error& e) {
    fail("NBSVM file '{}': {}", path, e.what());
  }
  const int64_t buckets = config.buckets;
  const std::map<std::string, Shape> shapes{{"weight", {buckets, 1}}, {"bias", {1}}, {"ratios", {buckets}}};
  EMBER_CHECK(tensors.size() == shapes.size(), "NBSVM file '{}' holds {} tensors, expected weight, bias, ratios", path,
              tensors.size());
  for (const auto& [name, shape] : shapes) {
    auto it = tensors.find(name);
    EMBER_CHECK(it != tensors.end(), "NBSVM file '{}' has no tensor '{}'", path, name);
    EMBER_CHECK(it->second.dtype() == Dtype::Float32 && it->second.shape() == shape, "NBSVM file '{}': tensor '{}' is "
                "{} {}, expected float32 {} (the settings' {} buckets)", path, name, dtype_name(it->second.dtype()),
                shape_str(it->second.shape()), shape_str(shape), buckets);
  }
  Vocabulary vocabulary = Vocabulary::load(folder + "/vocab.txt");
  EMBER_CHECK(text("vocab_sha256") == vocabulary_fingerprint(vocabulary), "{}: vocab.txt is not the vocabulary "
              "the NBSVM was trained with (its SHA-256 differs from the one nbsvm.safetensors records)", folder);
  check_content_fingerprint(tensors, meta, "NBSVM file '" + path + "'");  // last: what no check above can see
  return NbsvmModel{config, std::move(vocabulary), tensors.at("weight"), tensors.at("bias"),
                    tensors.at("ratios").to_vector<float>()};
}

std::vector<double> nbsvm_probabilities(const NbsvmModel& model, const std::vector<std::vector<int32_t>>& reviews) {
  return probabilities_of_sets(model.weight, model.bias, model.ratios, ngram_sets(reviews, model.config));
}

double nbsvm_predict(const NbsvmModel& model, const std::string& review) {
  const NbsvmConfig& c = model.config;
  return nbsvm_probabilities(model, {encode_truncated(model.vocabulary, review, c.run.model.max_len, c.run.truncate)})[0];
}

}  // namespace ember::imdb
