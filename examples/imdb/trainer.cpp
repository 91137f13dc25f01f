// The IMDb trainer: data preparation, the training loop, evaluation, checkpoints and prediction.
#include "examples/imdb/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/file_io.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/digest.h"
#include "examples/imdb/progress.h"
#include "examples/imdb/report.h"
#include "examples/imdb/truncation.h"
#include "examples/imdb/run_folder.h"
#include "nn/checkpoint.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace ember::imdb {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

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

std::vector<optim::ParamGroup> parameter_groups(const nn::Module& model, double weight_decay) {
  optim::ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (auto& [name, p] : model.named_parameters()) {
    bool is_matrix = p.dim() >= 2 && name.find("embedding") == std::string::npos;
    (is_matrix ? decay : no_decay).params.push_back(p);
  }
  return {decay, no_decay};
}

namespace {

void check_output_folder(const std::string& out) {
  std::error_code error;
  fs::create_directories(out, error);
  EMBER_CHECK(!error, "cannot create output folder '{}': {}", out, error.message());
  std::string probe = out + "/.ember-write-test";
  {
    std::ofstream f(probe);
    EMBER_CHECK(f.good(), "output folder '{}' is not writable", out);
  }
  fs::remove(probe, error);
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
  Data data{vocabulary ? *vocabulary : Vocabulary::build(split.train, config.vocab_words), {}, {}, {}, {}};
  data.train_tokens = encode(data.vocabulary, split.train, config.model.max_len, config.truncate);
  data.test_tokens = encode(data.vocabulary, split.test, config.model.max_len, config.truncate);
  data.train_labels = labels_of(split.train);
  data.test_labels = labels_of(split.test);
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

BatchTensors to_tensors(const Batch& batch, Device device) {
  BatchTensors t;
  t.tokens = from_vector(batch.tokens, {batch.batch, batch.seq_len});
  t.padding_mask = Tensor::empty({batch.batch, batch.seq_len}, Dtype::Bool);
  bool* mask = t.padding_mask.data<bool>();
  for (size_t i = 0; i < batch.key_mask.size(); ++i) mask[i] = batch.key_mask[i] == 0;
  t.labels = from_vector(batch.labels, {batch.batch});
  if (!device.is_cpu()) {
    t.tokens = t.tokens.to(device);
    t.padding_mask = t.padding_mask.to(device);
    t.labels = t.labels.to(device);
  }
  return t;
}

// ---- Evaluation

double evaluate(nn::TransformerClassifier& model, const std::vector<std::vector<int32_t>>& reviews,
                const std::vector<int>& labels, int64_t batch_size) {
  if (reviews.empty()) return 0.0;
  NoGradGuard no_grad;
  bool was_training = model.is_training();
  model.eval();
  // Sorted by length so that batches carry little padding (padding never changes a prediction).
  std::vector<int64_t> order = in_order(int64_t(reviews.size()));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return reviews[a].size() < reviews[b].size(); });
  Batcher batcher(reviews, labels, batch_size);
  const Device device = model.parameters().front().device();
  int64_t correct = 0;
  for (int64_t b = 0; b < batcher.num_batches(); ++b) {
    BatchTensors t = to_tensors(batcher.batch(order, b), device);
    Tensor predicted = argmax(model.forward(t.tokens, t.padding_mask), 1);
    correct += int64_t(sum(eq(predicted, t.labels).to(Dtype::Float64)).item<double>());
  }
  model.train(was_training);
  return double(correct) / double(reviews.size());
}

// ---- Training

RunResult train(const TrainConfig& config) {
  config.validate();
  check_output_folder(config.out);
  checked_device(config.device);  // before the data is loaded: a missing GPU fails at once
  if (!config.quiet) fmt::print(stderr, "Loading IMDb...\n");
  Data data = prepare_data(config);
  return train(config, data);
}

namespace {

nlohmann::ordered_json step_record(int64_t step, int64_t epoch, double loss, double lr) {
  return {{"kind", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}};
}

nlohmann::ordered_json epoch_record(const EpochResult& er, int64_t step, size_t test_reviews) {
  return {{"kind", "epoch"},
          {"epoch", er.epoch},
          {"step", step},
          {"train_loss", er.train_loss},
          {"test_accuracy", er.test_accuracy},
          {"test_reviews", test_reviews},
          {"train_seconds", er.seconds},
          {"eval_seconds", er.eval_seconds},
          {"real_tokens_per_s", er.real_tokens_per_s},
          {"padded_tokens_per_s", er.padded_tokens_per_s},
          {"peak_tensor_bytes", er.peak_bytes},
          {"peak_rss_bytes", er.peak_rss_bytes}};
}

constexpr const char* kModelFormat = "ember-imdb-model-v2";

// model.safetensors: the weights, the settings, the vocabulary's fingerprint and the checksum.
void save_model(const std::string& path, const TrainConfig& config, const nn::TransformerClassifier& model,
                const Vocabulary& vocabulary) {
  nn::TensorMap weights = model.state_dict();
  nn::Metadata meta = config.to_metadata();
  meta["format"] = kModelFormat;
  meta["vocab_sha256"] = vocabulary_fingerprint(vocabulary);
  meta[kContentKey] = content_fingerprint(weights, meta);
  nn::save_tensors(path, weights, meta);
}

}  // namespace

std::string vocabulary_fingerprint(const Vocabulary& vocabulary) {
  Digest digest(DigestKind::Sha256);
  for (const std::string& token : vocabulary.tokens()) digest.update(token + "\n");
  return digest.hex_digest();
}

RunResult train(const TrainConfig& config_in, const Data& data) {
  TrainConfig config = config_in;
  config.model.vocab_size = data.vocabulary.size();
  config.validate();
  const Device device = checked_device(config.device);
  EMBER_CHECK(!data.train_tokens.empty(), "train: there are no training reviews");
  check_output_folder(config.out);
  RunLock lock(config.out);  // one trainer per folder, from here until the end
  StopSignals signals;       // SIGINT / SIGTERM: checkpoint at the next step boundary, then stop
  if (config.threads > 0) set_num_threads(config.threads);
  // --precision bf16: every product of training and evaluation in bfloat16, the rest float32.
  MixedPrecisionGuard precision(parse_precision(config.precision));

  Generator gen(config.seed);  // initialisation, then dropout masks
  nn::TransformerClassifier model(config.model, gen);
  model.to(device);  // initialised on the CPU, so the same seed gives the same weights on every device
  optim::AdamW optimizer(parameter_groups(model, config.weight_decay), config.lr);
  Batcher batcher(data.train_tokens, data.train_labels, config.batch_size);
  const int64_t steps_per_epoch = batcher.num_batches();
  int64_t total_steps = 0;
  EMBER_CHECK(!__builtin_mul_overflow(steps_per_epoch, config.epochs, &total_steps) &&
                  total_steps <= optim::Optimizer::max_steps,
              "train: {} epochs of {} steps are more steps than a run can count", config.epochs, steps_per_epoch);
  optim::Schedule schedule{optim::parse_schedule(config.schedule), config.lr,
                           int64_t(std::llround(config.warmup * double(total_steps))), total_steps};

  // The run's state between steps: what a checkpoint holds besides the tensors.
  CheckpointInfo state;
  state.total_steps = total_steps;
  state.data_fingerprint = data_fingerprint(data);
  const std::string checkpoint_path = config.out + "/checkpoint.safetensors";
  const std::string model_path = config.out + "/model.safetensors";
  if (config.resume) {
    // Everything is checked before any file of the folder is written: a refused resume changes nothing.
    CheckpointInfo saved = restore_checkpoint(checkpoint_path, config, model, optimizer);  // onto the model's device
    EMBER_CHECK(saved.data_fingerprint == state.data_fingerprint,
                "resume: {} was trained on other data (its vocabulary or reviews differ from these); give the same "
                "--data and --limit, or a new --out", checkpoint_path);
    EMBER_CHECK(saved.total_steps == total_steps, "resume: {} is of a run of {} steps, these settings and data make {}",
                checkpoint_path, saved.total_steps, total_steps);
    state = saved;
    gen.set_state(config.seed, state.generator_offset);
  }
  data.vocabulary.save(config.out + "/vocab.txt");
  MetricsLog metrics(config.out + "/metrics.jsonl", config.resume, state.step);
  int64_t& step = state.step;
  auto save = [&]() {
    metrics.flush();  // every step the checkpoint covers is in metrics.jsonl first (a resume keeps exactly those)
    state.generator_offset = gen.offset();
    save_checkpoint(checkpoint_path, config, state, model, optimizer);
  };

  RunResult result;
  result.parameters = model.num_parameters();
  result.total_steps = total_steps;
  if (!config.quiet)
    fmt::print(stderr, "Model: {} heads, {} layers, dim {}, {} parameters; {} train / {} test reviews; {} steps; {} threads\n",
               config.model.heads, config.model.layers, config.model.dim, result.parameters, data.train_tokens.size(),
               data.test_tokens.size(), total_steps, num_threads());
  if (!config.quiet && config.precision == "bf16")
    fmt::print(stderr, "Precision: products in bfloat16{}, float32 weights and optimiser\n",
               Device::parse(config.device).is_cpu() ? fmt::format(" (CPU kernel {})", bf16_product_kernel()) : "");

  Progress progress(config.quiet ? Progress::Mode::Silent : Progress::detect(), config.log_every);
  const auto run_start = Clock::now();
  while (step < total_steps) {
    const int64_t epoch = step / steps_per_epoch;
    std::vector<int64_t> order = batcher.shuffled_order(config.seed, epoch);
    model.train();
    reset_peak_memory();
    if (device.is_cuda()) reset_peak_memory(device);
    int64_t real_tokens = 0, padded_tokens = 0;  // this process's part of the epoch (throughput)
    bool stop = false;
    const auto epoch_start = Clock::now();
    progress.start_epoch(epoch + 1, config.epochs, steps_per_epoch);
    for (int64_t b = step % steps_per_epoch; b < steps_per_epoch; ++b) {
      if (const int signal = StopSignals::received()) {
        result.stopped_by_signal = signal;
        stop = true;
        break;
      }
      Batch batch = batcher.batch(order, b);
      BatchTensors t = to_tensors(batch, device);
      optimizer.set_lr(schedule.lr_at(step));
      Tensor loss = cross_entropy(model.forward(t.tokens, t.padding_mask), t.labels);
      optimizer.zero_grad();
      loss.backward();
      if (config.clip > 0) optim::clip_grad_norm(model.parameters(), config.clip);
      optimizer.step();
      const double loss_value = loss.item<float>();
      EMBER_CHECK(std::isfinite(loss_value), "training diverged: the loss at step {} (epoch {}) is {}; that step is "
                  "not saved and the last checkpoint is kept (lower --lr, or clip with --clip)", step + 1, epoch + 1,
                  loss_value);
      ++step;

      result.step_losses.push_back(loss_value);
      state.epoch_loss_sum += loss_value;
      real_tokens += batch.real_tokens;
      padded_tokens += batch.batch * batch.seq_len;
      double elapsed = seconds_since(epoch_start);
      progress.update(b + 1, state.epoch_loss_sum / double(b + 1), double(real_tokens) / elapsed, elapsed);
      metrics.write(step_record(step, epoch + 1, loss_value, optimizer.lr()));
      // An epoch's last step is checkpointed after its evaluation (below), not here.
      if (config.save_every > 0 && step % config.save_every == 0 && step % steps_per_epoch != 0) save();
      if (config.stop_after > 0 && step >= config.stop_after) {
        stop = true;
        break;
      }
    }
    const double train_seconds = seconds_since(epoch_start);
    progress.finish_epoch();
    if (step != (epoch + 1) * steps_per_epoch) {  // stopped part-way through the epoch
      save();
      break;
    }
    const auto eval_start = Clock::now();
    EpochResult er;
    er.epoch = epoch + 1;
    er.train_loss = state.epoch_loss_sum / double(steps_per_epoch);  // every step of the epoch, resumed or not
    er.test_accuracy = evaluate(model, data.test_tokens, data.test_labels);
    er.seconds = train_seconds;
    er.eval_seconds = seconds_since(eval_start);
    er.real_tokens_per_s = double(real_tokens) / train_seconds;
    er.padded_tokens_per_s = double(padded_tokens) / train_seconds;
    er.peak_bytes = memory_stats().peak_allocated;
    er.peak_rss_bytes = peak_rss_bytes();
    if (device.is_cuda()) {
      MemoryStats gpu = memory_stats(device);
      er.gpu_allocated_bytes = gpu.allocated;
      er.gpu_peak_bytes = gpu.peak_allocated;
      er.gpu_reserved_bytes = gpu.reserved;
    }
    result.epochs.push_back(er);
    metrics.write(epoch_record(er, step, data.test_tokens.size()));
    if (device.is_cuda())
      metrics.write({{"kind", "gpu_memory"}, {"epoch", er.epoch}, {"device", device.str()},
                     {"allocated_bytes", er.gpu_allocated_bytes}, {"peak_bytes", er.gpu_peak_bytes},
                     {"reserved_bytes", er.gpu_reserved_bytes}});
    if (!config.quiet)
      fmt::print(stderr,
                 "epoch {}/{}: train loss {:.4f} | test accuracy {:.2f}% ({} reviews) | {:.1f}s train + {:.1f}s eval | "
                 "{:.0f} real tok/s ({:.0f} padded) | peak {:.0f} MiB tensors, {:.0f} MiB RSS\n",
                 er.epoch, config.epochs, er.train_loss, 100 * er.test_accuracy, data.test_tokens.size(), er.seconds,
                 er.eval_seconds, er.real_tokens_per_s, er.padded_tokens_per_s, er.peak_bytes / 1048576.0,
                 er.peak_rss_bytes / 1048576.0);
    if (!config.quiet && device.is_cuda())
      fmt::print(stderr, "epoch {}/{}: {} memory: {:.1f} MiB allocated, {:.1f} MiB peak, {:.1f} MiB reserved\n", er.epoch,
                 config.epochs, device.str(), er.gpu_allocated_bytes / 1048576.0, er.gpu_peak_bytes / 1048576.0,
                 er.gpu_reserved_bytes / 1048576.0);
    // The model, then the checkpoint: a checkpoint at an epoch's end always has its evaluation line
    // in metrics.jsonl and its model.safetensors beside it (a kill between the two redoes the epoch's
    // end from the checkpoint before).
    metrics.flush();
    save_model(model_path, config, model, data.vocabulary);
    state.epoch_loss_sum = 0;
    save();
    if (stop) break;
  }
  metrics.flush();
  result.steps = step;
  result.wall_seconds = seconds_since(run_start);
  result.finished = step == total_steps;
  if (result.stopped_by_signal != 0) return result;  // checkpointed; the report can wait for the resume
  if (result.finished) {
    std::error_code error;
    if (!fs::exists(model_path, error))  // a resume of a finished run whose model file was lost
      save_model(model_path, config, model, data.vocabulary);
    nlohmann::json last = last_epoch_record(metrics.path());
    if (!result.epochs.empty()) result.final_test_accuracy = result.epochs.back().test_accuracy;
    else if (last.is_object() && last.value("epoch", int64_t(0)) == config.epochs && last["test_accuracy"].is_number())
      result.final_test_accuracy = last["test_accuracy"].get<double>();
    else
      result.final_test_accuracy = evaluate(model, data.test_tokens, data.test_labels);
  }
  // The report is a by-product: when it cannot be written, the run has still succeeded.
  try {
    model.to(Device::cpu());  // the report's attention maps are computed on the CPU
    write_run_report(config.out, config, model, data);
    if (!config.quiet) fmt::print(stderr, "Report: {}/report.html\n", config.out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: could not write {}/report.html: {}\n", config.out, e.what());
  }
  return result;
}

// ---- Using a saved run

SavedRun load_run(const std::string& folder) {
  const std::string path = folder + "/model.safetensors";
  nn::Metadata meta;
  nn::TensorMap weights = nn::load_tensors(path, &meta);  // its size is bounded by the file's
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
