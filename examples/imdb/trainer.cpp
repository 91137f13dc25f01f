// The IMDb trainer: data preparation, evaluation, the model file and prediction (the training loop itself is
// training_run.cpp).
#include "examples/imdb/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "autograd/grad_mode.h"
#include "core/distributed/agreement.h"
#include "core/distributed/nccl.h"
#include "core/distributed/world.h"
#include "core/file_io.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/digest.h"
#include "examples/imdb/encoder_file.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/tokenizer.h"
#include "examples/imdb/truncation.h"
#include "nn/checkpoint.h"
#include "optim/optimizer.h"
#include "optim/weight_decay.h"

namespace ember::imdb {

namespace {

// The first n/2 negative and n/2 positive reviews, in their original order.
std::vector<Review> balanced_prefix(const std::vector<Review>& reviews, int64_t n) {
  std::vector<Review> out;
  int64_t want[2] = {n / 2, n - n / 2}, have[2] = {0, 0};
  for (const Review& r : reviews)
    if (have[r.label] < want[r.label]) {
      out.push_back(r);
      ++have[r.label];
    }
  return out;
}

std::vector<std::vector<int32_t>> encode(const Vocabulary& vocabulary, const std::vector<Review>& reviews,
                                         int64_t max_len, const std::string& truncate) {
  std::vector<std::vector<int32_t>> encoded;
  encoded.reserve(reviews.size());
  for (const Review& review : reviews) encoded.push_back(encode_truncated(vocabulary, review.text, max_len, truncate));
  // NOTE: a review with no tokens would leave attention nothing to attend to: give it one [UNK].
  for (auto& ids : encoded)
    if (ids.empty()) ids.push_back(Vocabulary::unk_id);
  return encoded;
}

}  // namespace

std::vector<optim::ParamGroup> parameter_groups(const nn::Module& model, double weight_decay, double encoder_lr_scale) {
  // The decaying groups first, then the others; the head after the encoder in each: with one rate (2
  // groups) or two (4), the parameters are numbered in the same order (the optimiser state's names).
  if (encoder_lr_scale == 1.0) return optim::weight_decay_groups(model, weight_decay);
  optim::ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  optim::ParamGroup encoder_decay{{}, weight_decay, encoder_lr_scale}, encoder_no_decay{{}, 0.0, encoder_lr_scale};
  for (auto& [name, p] : model.named_parameters()) {
    const bool is_matrix = optim::decays(name, p);
    // The head and the bigram embeddings are new in a fine-tune (--init copies neither): the head's rate.
    const bool in_encoder =
        encoder_lr_scale != 1.0 && name.rfind("head.", 0) != 0 && name.rfind("bigram_embedding.", 0) != 0;
    (is_matrix ? (in_encoder ? encoder_decay : decay) : (in_encoder ? encoder_no_decay : no_decay)).params.push_back(p);
  }
  return {encoder_decay, decay, encoder_no_decay, no_decay};
}

namespace {

// --validation's shuffle: a seed of its own, so that every run (whatever its --seed) holds out the same reviews.
constexpr uint64_t kValidationSeed = 0x7A11DA7E;

// Data::validation_fingerprint of the held-out reviews: a set's digest, so the same reviews held out in another
// order give the same one, and a review's text differing by a byte gives another.
std::string review_set_fingerprint(const std::vector<Review>& reviews) {
  if (reviews.empty()) return "";
  std::vector<std::string> each;
  each.reserve(reviews.size());
  for (const Review& review : reviews)
    each.push_back(digest_hex(DigestKind::Sha256, std::to_string(review.label) + " " + review.text));
  std::sort(each.begin(), each.end());
  Digest digest(DigestKind::Sha256);
  for (const std::string& hex : each) digest.update(hex);
  return digest.hex_digest();
}

}  // namespace

// ---- Data

Data prepare_data(const TrainConfig& config, const Vocabulary* vocabulary) {
  std::string path = config.data;
  if (path.empty()) path = ensure_imdb_downloaded(config.data_dir.empty() ? default_data_dir() : config.data_dir);
  ImdbSplit split = load_imdb(path);
  if (config.limit > 0) {
    split.train = balanced_prefix(split.train, config.limit);
    split.test = balanced_prefix(split.test, config.limit);
  }
  std::vector<Review> validation;
  if (config.validation > 0) {
    const int64_t count = int64_t(split.train.size());
    EMBER_CHECK(config.validation < count, "--validation {}: there are only {} training reviews to hold it out from",
                config.validation, count);
    // The last N of a shuffle with a seed of its own (not --seed): every run and seed holds out the same reviews.
    const std::vector<int64_t> order = shuffled_order(count, kValidationSeed, 0);
    std::vector<bool> held_out(size_t(count), false);
    for (int64_t i = count - config.validation; i < count; ++i) held_out[size_t(order[size_t(i)])] = true;
    std::vector<Review> kept;
    for (int64_t i = 0; i < count; ++i) (held_out[size_t(i)] ? validation : kept).push_back(std::move(split.train[size_t(i)]));
    split.train = std::move(kept);
  }
  Data data{vocabulary ? *vocabulary : Vocabulary::build(split.train, config.vocab_words), {}, {}, {}, {}, {}, {}, {}, {}};
  data.train_tokens = encode(data.vocabulary, split.train, config.model.max_len, config.truncate);
  data.test_tokens = encode(data.vocabulary, split.test, config.model.max_len, config.truncate);
  data.validation_tokens = encode(data.vocabulary, validation, config.model.max_len, config.truncate);
  data.validation_fingerprint = review_set_fingerprint(validation);
  data.train_labels = labels_of(split.train);
  data.test_labels = labels_of(split.test);
  data.validation_labels = labels_of(validation);
  for (const Review& review : split.test) {
    int64_t tokens = 0;
    for_each_token(review.text, [&](std::string_view) { return ++tokens, true; });
    data.test_lengths.push_back(tokens);
  }
  return data;
}

std::string data_fingerprint(const Data& data) {
  Digest digest(DigestKind::Sha256);
  for (const std::string& token : data.vocabulary.tokens()) digest.update(token + "\n");
  auto add = [&](const std::vector<std::vector<int32_t>>& reviews, const std::vector<int>& labels) {
    const int64_t count = int64_t(reviews.size());
    digest.update(&count, sizeof count);
    for (const auto& ids : reviews) {
      const int64_t length = int64_t(ids.size());
      digest.update(&length, sizeof length);
      digest.update(ids.data(), ids.size() * sizeof(int32_t));
    }
    digest.update(labels.data(), labels.size() * sizeof(int));
  };
  add(data.train_tokens, data.train_labels);
  add(data.test_tokens, data.test_labels);
  if (!data.validation_tokens.empty()) add(data.validation_tokens, data.validation_labels);  // (runs without: as before)
  return digest.hex_digest();
}

Device checked_device(const std::string& name) {
  Device device = Device::parse(name);
  if (device.is_cuda()) {
    const int count = cuda_device_count();
    EMBER_CHECK(device.index < count, "--device {}: {}", name,
                count == 0 ? std::string("no CUDA device is available (no NVIDIA GPU or driver here, or Ember was built "
                                         "without CUDA)")
                           : fmt::format("there are only {} CUDA devices", count));
  }
  return device;
}

Device rank_device(const std::string& name, bool several) {
  Device device = checked_device(name);
  if (device.is_cuda() && several && name == "cuda")
    device = distributed::device_for_local_rank(distributed::launch_info().local_rank);
  return device;
}

distributed::ProcessGroup& gradient_group(distributed::ProcessGroup& world, Device device, double timeout_seconds,
                                          std::unique_ptr<distributed::ProcessGroup>& nccl) {
  if (!device.is_cuda() || world.size() == 1) return world;
  nccl = distributed::make_nccl_group(world, device, timeout_seconds);
  return *nccl;
}

train::LoopSettings loop_settings_of(const TrainConfig& config, train::RunFolder& folder,
                                     distributed::ProcessGroup& world) {
  train::LoopSettings s;
  s.out = config.out;
  s.folder = &folder;
  s.save_every = config.save_every;
  s.stop_after = config.stop_after;
  s.log_every = config.log_every;
  s.quiet = config.quiet;
  s.world = &world;
  return s;
}

void check_zero_has_ranks(bool zero, Device device, bool several) {
  EMBER_CHECK(!(zero && device.is_cuda() && !several),
              "--zero shards AdamW's moments over the ranks of an mpirun job; on one GPU process there is nothing "
              "to shard: drop --zero, or run under mpirun -np N");
}

// ---- Evaluation

double evaluate(nn::TransformerClassifier& model, const std::vector<std::vector<int32_t>>& reviews,
                const std::vector<int>& labels, int64_t batch_size, distributed::ProcessGroup* world,
                train::GraphEvaluator* graphs) {
  if (reviews.empty()) return 0.0;
  const int rank = world != nullptr ? world->rank() : 0, ranks = world != nullptr ? world->size() : 1;
  EMBER_CHECK(graphs == nullptr || ranks == 1, "evaluate: evaluation graphs are for one process, not {} ranks", ranks);
  NoGradGuard no_grad;
  bool was_training = model.is_training();
  model.eval();
  // Sorted by length so that batches carry little padding (padding never changes a prediction).
  std::vector<int64_t> order = in_order(int64_t(reviews.size()));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return reviews[a].size() < reviews[b].size(); });
  Batcher batcher(reviews, labels, batch_size);
  const Device device = model.parameters().front().device();
  int64_t correct = 0;
  Tensor counted;  // the correct predictions so far, where the model is: read once, at the end
  for (int64_t b = rank; b < batcher.num_batches(); b += ranks) {  // whole batches, shared out in turn
    if (graphs != nullptr) {
      graphs->add(gpu_arrays(pad_for_graphs(batcher.batch(order, b), model.config.max_len), model.config));
      if (b == rank) fault_pause("evaluation");
      continue;
    }
    const train::Batch t = host_arrays(batcher.batch(order, b), device);
    Tensor predicted = argmax(model.forward(t.at("tokens"), t.at("mask")), 1);
    Tensor batch_correct = sum(eq(predicted, t.at("labels").to(predicted.device())).to(Dtype::Float64));
    counted = counted.defined() ? counted + batch_correct : batch_correct;
    if (b == rank) fault_pause("evaluation");  // the kill tests' kill mid-evaluation (core/file_io.h)
  }
  if (graphs != nullptr) correct = std::llround(graphs->take_total());
  else if (counted.defined()) correct = std::llround(counted.item<double>());
  model.train(was_training);
  if (ranks > 1) {
    Tensor count = from_vector(std::vector<int64_t>{correct});
    world->all_reduce(count, distributed::ReduceOp::Sum);
    correct = count.item<int64_t>();
  }
  return double(correct) / double(reviews.size());
}

double accuracy_of(const std::vector<double>& positive_probabilities, const std::vector<int>& labels) {
  EMBER_CHECK(positive_probabilities.size() == labels.size(), "accuracy_of: {} probabilities for {} labels",
              positive_probabilities.size(), labels.size());
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += int((positive_probabilities[i] > 0.5) == (labels[i] == 1));
  return labels.empty() ? 0.0 : double(correct) / double(labels.size());
}

std::vector<LengthBucket> accuracy_by_length(nn::TransformerClassifier& model, const Data& data,
                                             const std::vector<int64_t>& bounds, distributed::ProcessGroup* world) {
  EMBER_CHECK(data.test_lengths.size() == data.test_tokens.size(), "accuracy_by_length: {} lengths for {} test reviews",
              data.test_lengths.size(), data.test_tokens.size());
  for (size_t i = 0; i < bounds.size(); ++i)
    EMBER_CHECK(bounds[i] >= 0 && (i == 0 || bounds[i] > bounds[i - 1]),
                "accuracy_by_length: the bounds must be increasing and not negative, got {}", fmt::join(bounds, ","));
  std::vector<LengthBucket> buckets;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    LengthBucket bucket;
    bucket.shortest = i == 0 ? 0 : bounds[i - 1] + 1;
    bucket.longest = i < bounds.size() ? bounds[i] : -1;
    std::vector<std::vector<int32_t>> reviews;
    std::vector<int> labels;
    for (size_t r = 0; r < data.test_tokens.size(); ++r) {
      const int64_t length = data.test_lengths[r];
      if (length < bucket.shortest || (bucket.longest >= 0 && length > bucket.longest)) continue;
      reviews.push_back(data.test_tokens[r]);
      labels.push_back(data.test_labels[r]);
    }
    bucket.reviews = int64_t(reviews.size());
    bucket.correct = std::llround(evaluate(model, reviews, labels, 64, world) * double(bucket.reviews));
    buckets.push_back(bucket);
  }
  return buckets;
}

// ---- Training

RunResult train_classifier(const TrainConfig& config) {
  std::unique_ptr<distributed::ProcessGroup> one = distributed::make_single_process_group();
  return train_classifier(config, *one);
}

RunResult train_classifier(const TrainConfig& config, const Data& data) {
  std::unique_ptr<distributed::ProcessGroup> one = distributed::make_single_process_group();
  return train_classifier(config, data, *one);
}

RunResult train_classifier(const TrainConfig& config, distributed::ProcessGroup& world) {
  config.validate();
  distributed::check_same_settings(world, config.shared_settings());  // before anything slow
  distributed::on_root(world, [&] { train::check_output_folder(config.out); });
  checked_device(config.device);  // before the data is loaded: a missing GPU fails at once
  if (!config.quiet && world.rank() == 0) fmt::print(stderr, "Loading IMDb...\n");
  // Rank 0 downloads first (when --data is not given); the others then find the download cached.
  if (config.data.empty() && world.size() > 1)
    distributed::on_root(world, [&] {
      ensure_imdb_downloaded(config.data_dir.empty() ? default_data_dir() : config.data_dir);
    });
  // --init: the pretrained encoder is checked before the data is read, and its vocabulary encodes the reviews.
  std::optional<PretrainedEncoder> encoder;
  if (!config.init.empty()) {
    encoder.emplace(load_encoder(config.init));
    check_encoder_settings_fit(*encoder, config);  // (its held-out reviews are compared once the data is read)
  }
  Data data = prepare_data(config, encoder ? &encoder->vocabulary : nullptr);
  return train_classifier(config, data, world);
}

// ---- The model file

namespace {

constexpr const char* kModelFormat = "ember-imdb-model-v2";

}  // namespace

void save_model(const std::string& path, const TrainConfig& config, const nn::TransformerClassifier& model,
                const Vocabulary& vocabulary) {
  nn::TensorMap weights = model.state_dict();
  nn::Metadata meta = config.to_metadata();
  meta["format"] = kModelFormat;
  meta["vocab_sha256"] = vocabulary_fingerprint(vocabulary);
  meta[kContentKey] = content_fingerprint(weights, meta);
  nn::save_tensors(path, weights, meta);
}

std::string vocabulary_fingerprint(const Vocabulary& vocabulary) {
  Digest digest(DigestKind::Sha256);
  for (const std::string& token : vocabulary.tokens()) digest.update(token + "\n");
  return digest.hex_digest();
}

// ---- Using a saved run

SavedRun load_run(const std::string& folder) {
  const std::string path = folder + "/model.safetensors";
  nn::Metadata meta;
  nn::TensorMap weights = nn::load_weights(path, &meta);  // its size is bounded by the file's
  auto format = meta.find("format");
  EMBER_CHECK(format != meta.end() && format->second == kModelFormat, "model file '{}' has format '{}', expected {} "
              "(written by an older trainer? train again)", path,
              format == meta.end() ? "(none)" : format->second.substr(0, 60), kModelFormat);
  TrainConfig config;
  try {
    config = TrainConfig::from_metadata(meta);
  } catch (const Error& e) {
    fail("model file '{}': {}", path, e.what());
  }
  check_settings_match_tensors(config.model, weights, path);  // before building: the sizes are the file's
  auto recorded = meta.find("vocab_sha256");
  EMBER_CHECK(recorded != meta.end(), "model file '{}' has no 'vocab_sha256' in its metadata", path);
  SavedRun run{config, Vocabulary::load(folder + "/vocab.txt"), nullptr};
  EMBER_CHECK(run.vocabulary.size() == run.config.model.vocab_size,
              "{}: vocab.txt has {} tokens but the model was trained with {}", folder, run.vocabulary.size(),
              run.config.model.vocab_size);
  EMBER_CHECK(recorded->second == vocabulary_fingerprint(run.vocabulary),
              "{}: vocab.txt is not the vocabulary the model was trained with (its SHA-256 differs from the one "
              "model.safetensors records)", folder);
  Generator gen(0);
  run.model = std::make_shared<nn::TransformerClassifier>(run.config.model, gen);
  try {
    run.model->load_state_dict(weights);
  } catch (const Error& e) {
    fail("model file '{}': {}", path, e.what());
  }
  check_content_fingerprint(weights, meta, "model file '" + path + "'");  // last: what no check above can see
  run.model->eval();
  return run;
}

double predict_positive(const SavedRun& run, const std::string& review) {
  NoGradGuard no_grad;
  std::vector<int32_t> ids = encode_truncated(run.vocabulary, review, run.config.model.max_len, run.config.truncate);
  if (ids.empty()) ids.push_back(Vocabulary::unk_id);
  Tensor tokens = from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, int64_t(ids.size())});
  Tensor padding = zeros({1, int64_t(ids.size())}, Dtype::Bool);
  std::vector<float> probabilities = softmax(run.model->forward(tokens, padding), 1).to_vector<float>();
  EMBER_CHECK(probabilities.size() == 2, "predict: the model gives {} classes, expected 2 (negative, positive)",
              probabilities.size());
  return probabilities[1];
}

}  // namespace ember::imdb
