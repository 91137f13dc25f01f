// `imdb pretrain`'s run: its setup, its step (masks drawn per step, the loss at the masked positions only), its
// checkpoints (exact resume) and its outputs. The training layer's loop (optim/train/loop.h) runs the steps and
// owns the run folder, the metrics log, the stop signals and the progress line; this file adds the step, its
// checkpoint format, its epoch record, the encoder file. It uses the classifier's pieces: the batcher, the
// checkpoint's checksum (trainer.h), AdamW's parameter groups and data parallelism (nn/data_parallel.h).
#include "examples/imdb/pretrain.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/distributed/agreement.h"
#include "core/distributed/world.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/encoder_file.h"
#include "examples/imdb/masked_token_model.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/setting_table.h"
#include "nn/checkpoint.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/sharded_adamw.h"
#include "optim/train/loop.h"

namespace ember::imdb {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kFirstWord = 2;  // a random replacement is a word: not [PAD] or [UNK]

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The state between steps that a checkpoint keeps besides the tensors.
struct PretrainState {
  int64_t step = 0, total_steps = 0;
  uint64_t generator_offset = 0;
  double epoch_loss_sum = 0;            // the current epoch's whole-batch losses so far
  int64_t epoch_correct = 0, epoch_masked = 0;
  std::string data_fingerprint;
};

// A pretraining checkpoint's metadata entry, or an ember::Error naming the file and the key.
const std::string& entry(const nn::Metadata& meta, const std::string& path, const char* key) {
  auto it = meta.find(key);
  EMBER_CHECK(it != meta.end(), "'{}' has no '{}' in its metadata (not a pretraining checkpoint)", path, key);
  return it->second;
}

// The checkpoint's format, and its state's numbers parsed in full: an ember::Error naming the file and the key.
PretrainState read_state(const nn::Metadata& meta, const std::string& path) {
  const std::string& format = entry(meta, path, "format");
  EMBER_CHECK(format == kPretrainCheckpointFormat, "'{}' has format '{}', expected {}{}", path, format.substr(0, 60),
              kPretrainCheckpointFormat,
              format.rfind("ember-imdb-checkpoint", 0) == 0 ? " (a classifier's checkpoint: resume it with "
                                                             "`imdb train --resume`)" : "");
  auto integer = [&](const char* key, int64_t min, int64_t max) {
    std::optional<int64_t> value = parse_integer(entry(meta, path, key), min, max);
    EMBER_CHECK(value.has_value(), "'{}': '{}' = '{}' is not an integer in [{}, {}]", path, key,
                entry(meta, path, key).substr(0, 40), min, max);
    return *value;
  };
  PretrainState saved;
  saved.step = integer("step", 0, optim::Optimizer::max_steps);
  saved.total_steps = integer("total_steps", 1, optim::Optimizer::max_steps);
  EMBER_CHECK(saved.step <= saved.total_steps, "'{}': step {} is past the end of the run ({} steps)", path, saved.step,
              saved.total_steps);
  saved.epoch_correct = integer("epoch_correct", 0, optim::Optimizer::max_steps);
  saved.epoch_masked = integer("epoch_masked", 0, optim::Optimizer::max_steps);
  const std::string& offset_text = entry(meta, path, "generator_offset");
  std::optional<uint64_t> offset = parse_unsigned(offset_text);
  EMBER_CHECK(offset.has_value(), "'{}': 'generator_offset' = '{}' is not an unsigned integer", path,
              offset_text.substr(0, 40));
  saved.generator_offset = *offset;
  // Written in hex ("%a"), so that it reads back to the same double.
  const std::string& sum = entry(meta, path, "epoch_loss_sum");
  char* end = nullptr;
  saved.epoch_loss_sum = sum.empty() || std::isspace(static_cast<unsigned char>(sum[0])) ? NAN
                                                                                        : std::strtod(sum.c_str(), &end);
  EMBER_CHECK(end == sum.c_str() + sum.size() && std::isfinite(saved.epoch_loss_sum) && saved.epoch_loss_sum >= 0,
              "'{}': 'epoch_loss_sum' = '{}' is not a finite number >= 0", path, sum.substr(0, 40));
  saved.data_fingerprint = entry(meta, path, "data_fingerprint");
  EMBER_CHECK(saved.data_fingerprint.size() == 64 &&
                  saved.data_fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos,
              "'{}': 'data_fingerprint' is not a SHA-256 in hex", path);
  return saved;
}

// What a pretraining checkpoint's file says, checked before any model is built from it: its format and state
// (`state`), its settings parsed in full, its tensors' prefixes, the model's sizes against the tensors.
PretrainCheckpoint checked_read(const std::string& path, nn::TensorMap tensors, const nn::Metadata& meta,
                                PretrainState& state) {
  PretrainCheckpoint read;
  read.tensors = std::move(tensors);
  state = read_state(meta, path);
  read.step = state.step;
  read.total_steps = state.total_steps;
  try {
    read.config.train = TrainConfig::from_metadata(meta);
    const std::optional<int64_t> steps = parse_integer(entry(meta, path, "pretrain_steps"), 0, optim::Optimizer::max_steps);
    EMBER_CHECK(steps.has_value(), "'pretrain_steps' is not an integer in [0, {}]", optim::Optimizer::max_steps);
    read.config.steps = *steps;
    EMBER_CHECK(*steps == 0 || *steps == state.total_steps, "'pretrain_steps' = {} but 'total_steps' = {}: a run of "
                "--steps N has N steps", *steps, state.total_steps);
    const std::string& rates = entry(meta, path, "mask_rates");
    std::vector<double> values;
    for (size_t begin = 0; begin <= rates.size();) {
      const size_t comma = std::min(rates.find(',', begin), rates.size());
      const std::optional<double> value = parse_real(rates.substr(begin, comma - begin), 0.0, 1.0);
      EMBER_CHECK(value.has_value(), "'mask_rates' = '{}' is not three numbers in [0, 1]", rates.substr(0, 60));
      values.push_back(*value);
      begin = comma + 1;
    }
    EMBER_CHECK(values.size() == 3, "'mask_rates' = '{}' is not three numbers in [0, 1]", rates.substr(0, 60));
    read.config.rates = {values[0], values[1], values[2]};
  } catch (const Error& e) {
    fail("'{}': {}", path, e.what());
  }
  const nn::ClassifierConfig& model_config = read.config.train.model;
  for (const auto& [name, t] : read.tensors)
    EMBER_CHECK(name.rfind("model.", 0) == 0 || name.rfind("optim.", 0) == 0,
                "'{}': unexpected tensor '{}' (a checkpoint holds model.* and optim.* only)", path, name);
  // The sizes against the tensors before anything is built from them (the classifier's head: none to check).
  nn::TensorMap with_head = nn::with_prefix_removed(read.tensors, "model.");
  with_head.emplace("head.weight", zeros({model_config.classes, model_config.dim}));
  check_settings_match_tensors(model_config, with_head, path);
  return read;
}

// Loads a checkpoint's model.* and optim.* tensors into `model` and `optimizer` (names, shapes, dtypes, every moment),
// then its checksum: an ember::Error naming the file.
void load_pretrain_state(const std::string& path, const nn::TensorMap& tensors, const nn::Metadata& meta,
                         int64_t step, MaskedTokenModel& model, optim::Optimizer& optimizer) {
  try {
    model.load_state_dict(nn::with_prefix_removed(tensors, "model."));
    optimizer.load_state_dict(nn::with_prefix_removed(tensors, "optim."));
  } catch (const Error& e) {
    fail("'{}': {}", path, e.what());
  }
  EMBER_CHECK(optimizer.step_count() == step, "'{}': the optimiser has taken {} steps but the checkpoint says {}", path,
              optimizer.step_count(), step);
  if (optimizer.step_count() > 0) {
    const std::vector<std::string> missing = optimizer.missing_state();
    EMBER_CHECK(missing.empty(), "'{}': the optimiser state lacks 'optim.{}' (every parameter has moments after the "
                "first step)", path, missing.empty() ? "" : missing.front());
  }
  check_content_fingerprint(tensors, meta, path);
}

class PretrainRun {
 public:
  PretrainRun(const PretrainConfig& config, const Data& data, distributed::ProcessGroup& world);
  PretrainResult run();

 private:
  class Step;  // its train::Step

  void resume();
  train::LoopSettings loop_settings();
  void save(const train::RunState& at);  // collective; rank 0 writes encoder.safetensors, then the checkpoint
  void save_encoder_file();  // rank 0
  void record_epoch(const train::EpochResult& done);

  PretrainConfig config_;
  TrainConfig& train_;  // config_.train, with model.vocab_size counting [MASK]
  const Data& data_;
  distributed::ProcessGroup& world_;
  const bool lead_, several_;
  Device device_;
  int64_t mask_id_ = 0;
  std::optional<train::RunFolder> folder_;  // made and locked by rank 0; SIGINT / SIGTERM caught on every rank
  std::optional<MixedPrecisionGuard> precision_;
  Generator gen_;
  std::optional<MaskedTokenModel> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<Batcher> batcher_;
  int64_t steps_per_epoch_ = 0, epochs_ = 0;
  optim::Schedule schedule_;
  PretrainState state_;
  std::string checkpoint_path_;
  std::unique_ptr<distributed::ProcessGroup> nccl_;  // several GPU ranks: the gradients go over NCCL
  distributed::ProcessGroup* gradients_ = nullptr;   // world_ or nccl_
  std::optional<nn::DataParallel> dp_;
  std::vector<int64_t> order_;  // the epoch's order of the windows' batches
  int64_t order_epoch_ = -1;
  std::optional<train::Loop> loop_;
  PretrainResult result_;
};

// One pretraining step: the whole batch's masks (on every rank: they depend on the seed and the step alone), this
// rank's rows, the loss at its masked positions, backward (each rank's share), the update; then the whole batch's
// loss and accuracy (several ranks: summed over them, with any rank's stop signal).
class PretrainRun::Step final : public train::Step {
 public:
  explicit Step(PretrainRun& run) : run_(run) {}
  void stage(const train::StepAt& at) override { staged_ = at; }
  train::StepResult run(const Tensor& loss_slot) override;
  // NOTE: on several ranks each stops at the same step (agreed at the step before).
  int stop_signal() const override { return run_.several_ ? agreed_signal_ : train::StopSignals::received(); }

 private:
  PretrainRun& run_;
  std::optional<train::StepAt> staged_;
  int agreed_signal_ = 0;
};

PretrainRun::PretrainRun(const PretrainConfig& config, const Data& data, distributed::ProcessGroup& world)
    : config_(config), train_(config_.train), data_(data), world_(world), lead_(world.rank() == 0),
      several_(world.size() > 1), gen_(config.train.seed) {
  mask_id_ = data.vocabulary.size();  // [MASK]: one row past the vocabulary's
  train_.model.vocab_size = mask_id_ + 1;
  train_.validate();
  EMBER_CHECK(train_.cuda_graph != "on", "pretrain: --cuda-graph on is not supported (its steps run op by op)");
  EMBER_CHECK(config_.steps >= 0 && config_.steps <= optim::Optimizer::max_steps, "pretrain: --steps {} is out of range",
              config_.steps);
  if (!lead_) train_.quiet = true;
  std::map<std::string, std::string> shared = train_.shared_settings();
  shared["pretrain_steps"] = std::to_string(config_.steps);
  distributed::check_same_settings(world_, shared);
  device_ = rank_device(train_.device, several_);  // under mpirun, "cuda" is each rank's own GPU
  distributed::on_root(world_, [&] {
    folder_.emplace(train_.out, &world_);  // made and locked
    check_run_folder_kind(train_.out, RunKind::pretraining, "pretrain", train_.overwrite, train_.resume);
    check_run_files_writable(train_.out, {"vocab.txt", "metrics.jsonl", "checkpoint.safetensors", kEncoderFile});
  });
  if (!lead_) folder_.emplace(train_.out, &world_);  // (signals caught on every rank)
  if (train_.threads > 0) {
    set_num_threads(train_.threads);
  } else if (several_) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / std::max(1, distributed::launch_info().local_size)));
  }
  precision_.emplace(parse_precision(train_.precision));

  std::vector<std::vector<int32_t>> windows = review_windows(data_.train_tokens, train_.model.max_len);
  EMBER_CHECK(!windows.empty(), "pretrain: there are no training reviews");
  result_.windows = int64_t(windows.size());
  batcher_.emplace(std::move(windows), std::vector<int>(size_t(result_.windows), 0), train_.batch_size);
  steps_per_epoch_ = batcher_->num_batches();
  state_.total_steps = config_.steps > 0 ? config_.steps : 0;
  if (config_.steps == 0)
    EMBER_CHECK(!__builtin_mul_overflow(steps_per_epoch_, train_.epochs, &state_.total_steps) &&
                    state_.total_steps <= optim::Optimizer::max_steps,
                "pretrain: {} epochs of {} steps are more steps than a run can count", train_.epochs, steps_per_epoch_);
  epochs_ = (state_.total_steps + steps_per_epoch_ - 1) / steps_per_epoch_;
  schedule_ = optim::Schedule{optim::parse_schedule(train_.schedule), train_.lr,
                              int64_t(std::llround(train_.warmup * double(state_.total_steps))), state_.total_steps};

  check_zero_has_ranks(train_.zero, device_, several_);
  model_.emplace(train_.model, gen_);
  model_->to(device_);
  gradients_ = &gradient_group(world_, device_, train_.dist_timeout, nccl_);  // NCCL between several GPU ranks
  if (train_.zero)  // ZeRO-1: the moments sharded over the ranks; it clips by the global norm itself
    optimizer_ = std::make_unique<optim::ShardedAdamW>(parameter_groups(*model_, train_.weight_decay), *gradients_,
                                                       train_.lr, train_.clip);
  else
    optimizer_ = std::make_unique<optim::AdamW>(parameter_groups(*model_, train_.weight_decay), train_.lr);
  state_.data_fingerprint = data_fingerprint(data_);
  checkpoint_path_ = train_.out + "/checkpoint.safetensors";
  if (train_.resume) resume();
  distributed::on_root(world_, [&] {
    if (train_.overwrite) remove_run_files(train_.out);  // every check has passed: what was there goes
    data_.vocabulary.save(train_.out + "/vocab.txt");
  });
  dp_.emplace(*model_, *gradients_, nn::DataParallelOptions{.bucket_bytes = train_.bucket_kb * 1024,
                                                            .overlap = train_.overlap, .reduce_gradients = !train_.zero});
  loop_.emplace(*model_, *optimizer_, loop_settings());
  result_.parameters = model_->num_parameters();
  result_.total_steps = state_.total_steps;
  if (!train_.quiet)
    fmt::print(stderr, "Pretraining (masked tokens): {} heads, {} layers, dim {}, {} parameters; {} training reviews in "
               "{} windows of up to {} tokens; {} steps ({} per epoch); {}{} threads\n",
               train_.model.heads, train_.model.layers, train_.model.dim, result_.parameters, data_.train_tokens.size(),
               result_.windows, train_.model.max_len, state_.total_steps, steps_per_epoch_,
               several_ ? fmt::format("{} ranks ({}{}) x ", world_.size(), gradients_->backend(), train_.zero ? ", ZeRO-1" : "")
                        : std::string(),
               num_threads());
}

// Everything checked (the file, the settings, the data, every tensor) before any file is written.
void PretrainRun::resume() {
  nn::TensorMap tensors;
  nn::Metadata meta;
  // load_weights: a NaN or an infinity is refused, naming the tensor (a checksum redone over it passes).
  distributed::on_root(world_, [&] {
    check_resume_has_checkpoint(checkpoint_path_, "pretrain");
    tensors = nn::load_weights(checkpoint_path_, &meta);
  });
  if (several_) {
    distributed::broadcast_tensors(world_, tensors);
    meta = nlohmann::json::parse(distributed::broadcast_string(world_, nlohmann::json(meta).dump())).get<nn::Metadata>();
  }
  try {
    const std::string& path = checkpoint_path_;
    try {
      PretrainState saved;
      const PretrainCheckpoint read = checked_read(path, std::move(tensors), meta, saved);
      const std::map<std::string, std::string> wanted = config_.to_metadata();
      for (const auto& [key, value] : wanted) {
        // A setting added after the file was written reads as what such a file means (setting_table.h's `before`).
        const std::optional<std::string> recorded = recorded_setting(meta, key);
        EMBER_CHECK(recorded.has_value(), "'{}' has no '{}' in its metadata (not a pretraining checkpoint)", path, key);
        EMBER_CHECK(*recorded == value, "{} was written with other settings: {} is {} there but {} here", path, key,
                    recorded->substr(0, 40), value);
      }
      EMBER_CHECK(saved.data_fingerprint == state_.data_fingerprint, "{} was pretrained on other data (its "
                  "vocabulary or reviews differ); give the same --data, --limit and --validation, or a new --out", path);
      EMBER_CHECK(saved.total_steps == state_.total_steps, "{} is at step {} of a run of {} steps; these settings make "
                  "{}", path, saved.step, saved.total_steps, state_.total_steps);
      load_pretrain_state(path, read.tensors, meta, saved.step, *model_, *optimizer_);
      state_ = saved;
    } catch (const Error& e) {
      fail("resume: {}", e.what());
    }
  } catch (const Error& e) {
    if (several_) throw distributed::AgreedError(e.what());
    throw;
  }
  gen_.set_state(train_.seed, state_.generator_offset);
}

// The encoder, then the checkpoint (as train writes its model before its checkpoint): the encoder in the folder
// is never older than the checkpoint beside it, so a kill between the two files leaves a checkpoint that --resume
// continues from, never a finished checkpoint beside an earlier step's encoder.
void PretrainRun::save(const train::RunState& at) {
  if (several_) dp_->check_replicas_agree();
  const auto sum = [&](const char* name) {
    const auto it = at.epoch_sums.find(name);
    return it == at.epoch_sums.end() ? int64_t(0) : int64_t(std::llround(it->second));
  };
  state_.step = at.step;
  state_.generator_offset = at.generator_offset;
  state_.epoch_loss_sum = at.epoch_loss_sum;
  state_.epoch_correct = sum("correct");
  state_.epoch_masked = sum("masked");
  const nn::TensorMap optimizer_state = optimizer_->state_dict();
  distributed::on_root(world_, [&] {
    nn::TensorMap tensors = nn::with_prefix_added(model_->state_dict(), "model.");
    for (auto& [name, t] : nn::with_prefix_added(optimizer_state, "optim.")) tensors.emplace(name, t);
    try {
      nn::check_all_finite(tensors, "after step " + std::to_string(state_.step));
    } catch (const Error& e) {
      fail("pretraining diverged: {}; the checkpoint and encoder before it are kept (lower --lr)", e.what());
    }
    // The encoder with every checkpoint: a run stopped early (--stop-after, a signal) can be fine-tuned from too.
    save_encoder_file();
    nn::Metadata meta = config_.to_metadata();
    meta["format"] = kPretrainCheckpointFormat;
    meta["step"] = std::to_string(state_.step);
    meta["total_steps"] = std::to_string(state_.total_steps);
    meta["generator_offset"] = std::to_string(state_.generator_offset);
    meta["epoch_loss_sum"] = fmt::format("{:a}", state_.epoch_loss_sum);  // reads back to the same double
    meta["epoch_correct"] = std::to_string(state_.epoch_correct);
    meta["epoch_masked"] = std::to_string(state_.epoch_masked);
    meta["data_fingerprint"] = state_.data_fingerprint;
    meta[kContentKey] = content_fingerprint(tensors, meta);
    nn::save_tensors(checkpoint_path_, tensors, meta);
  });
}

// (rank 0)
void PretrainRun::save_encoder_file() {
  save_encoder(train_.out + "/" + kEncoderFile, train_, *model_, data_.vocabulary, data_.validation_fingerprint);
}

// What the loop does for this run: its steps and epochs (the last one shorter with --steps), the schedule, the
// checkpoints (this program's format with the encoder beside each: save), the epoch records (record_epoch).
train::LoopSettings PretrainRun::loop_settings() {
  train::LoopSettings s = loop_settings_of(train_, *folder_, world_);
  s.steps = state_.total_steps;
  s.steps_per_epoch = steps_per_epoch_;
  s.schedule = schedule_;
  s.device = device_;
  s.generator = &gen_;
  s.write_checkpoint = [this](const train::RunState& at) { save(at); };
  s.record_epoch = [this](const train::EpochResult& done) { record_epoch(done); };
  return s;
}

train::StepResult PretrainRun::Step::run(const Tensor&) {
  EMBER_CHECK(staged_.has_value(), "pretrain: no batch was staged");
  const train::StepAt at = *staged_;
  staged_.reset();
  PretrainRun& r = run_;
  if (at.epoch != r.order_epoch_) {
    r.order_ = r.train_.length_buckets > 0 ? r.batcher_->length_bucketed_order(r.train_.seed, at.epoch, r.train_.length_buckets)
                                           : r.batcher_->shuffled_order(r.train_.seed, at.epoch);
    r.order_epoch_ = at.epoch;
  }
  const Batch whole = r.batcher_->batch(r.order_, at.index);
  const MaskedBatch masked = mask_tokens(whole, r.mask_id_, kFirstWord, r.mask_id_ + 1, r.train_.seed, at.step, 0,
                                         r.config_.rates);
  const distributed::Range rows = distributed::shard_range(whole.batch, r.world_.rank(), r.world_.size());
  const int64_t T = whole.seq_len, first = rows.begin * T, last = rows.end * T;
  std::vector<int64_t> positions, targets;
  for (size_t i = 0; i < masked.positions.size(); ++i)
    if (masked.positions[i] >= first && masked.positions[i] < last) {
      positions.push_back(masked.positions[i] - first);
      targets.push_back(masked.targets[i]);
    }
  Batch mine = r.batcher_->batch_rows(r.order_, at.index, rows.begin, rows.size());
  mine.tokens.assign(masked.inputs.begin() + first, masked.inputs.begin() + last);
  const train::Batch t = host_arrays(mine, r.device_);
  if (r.several_) r.gen_.set_batch_slice({whole.batch, rows.begin, rows.size()});
  r.optimizer_->zero_grad();
  double loss_value = 0, correct = 0;
  const double all_masked = double(masked.positions.size()), my_masked = double(positions.size());
  if (!positions.empty()) {
    MaskedTokenModel::Output out = r.model_->forward(t.at("tokens"), t.at("mask"), from_vector(positions), from_vector(targets));
    // Each rank's mean weighs its share of the batch's masked tokens; DataParallel averages (/ size).
    if (r.several_) (out.loss * (my_masked * double(r.world_.size()) / all_masked)).backward();
    else out.loss.backward();
    loss_value = double(out.loss.item<float>());
    correct = out.correct.item<double>();
  }
  r.dp_->synchronize_gradients();
  if (r.train_.clip > 0 && !r.train_.zero) optim::clip_grad_norm_(r.model_->parameters(), r.train_.clip);
  r.optimizer_->step();
  if (r.several_) {  // the whole batch's loss and accuracy, and any rank's signal
    Tensor sums = from_vector(std::vector<double>{loss_value * my_masked, correct, double(train::StopSignals::received())});
    r.world_.all_reduce(sums, distributed::ReduceOp::Sum);
    const std::vector<double> totals = sums.to_vector<double>();
    loss_value = totals[0] / all_masked;
    correct = totals[1];
    if (totals[2] > 0) agreed_signal_ = train::StopSignals::received() != 0 ? train::StopSignals::received() : SIGTERM;
  }
  const double accuracy = correct / all_masked;
  r.result_.step_accuracies.push_back(accuracy);
  train::StepResult result;
  result.whole_batch_loss = loss_value;
  result.real_tokens = whole.real_tokens;
  result.logged = {{"accuracy", accuracy}, {"masked", int64_t(masked.positions.size())}};
  result.counted = {{"correct", double(std::llround(correct))}, {"masked", all_masked}};
  return result;
}

PretrainResult PretrainRun::run() {
  const auto run_start = Clock::now();
  // A --resume with nothing to train: the run had finished (killed after its last checkpoint, or its encoder lost),
  // or it is at --stop-after already (it trained one step more). Its encoder is written again from the checkpoint's
  // model, the same bytes as the run's own.
  result_.already_finished = train_.resume && state_.step == state_.total_steps;
  const bool at_stop = train_.stop_after > 0 && state_.step >= train_.stop_after;
  if (train_.resume && (result_.already_finished || at_stop)) distributed::on_root(world_, [&] { save_encoder_file(); });
  Step step(*this);
  const train::LoopResult trained = loop_->run(
      step, {state_.step, state_.total_steps, state_.generator_offset, state_.epoch_loss_sum,
             {{"correct", double(state_.epoch_correct)}, {"masked", double(state_.epoch_masked)}}});
  result_.steps = trained.steps;
  result_.finished = trained.finished;
  result_.stopped_by_signal = trained.stopped_by_signal;
  result_.step_losses = trained.step_losses;
  result_.wall_seconds = seconds_since(run_start);
  if (result_.finished && lead_ && result_.stopped_by_signal == 0) {
    loop_->metrics()->flush();
    try {
      write_pretrain_report(train_.out, config_.to_metadata(), result_.parameters);
      if (!train_.quiet) fmt::print(stderr, "Report: {}/report.html\n", train_.out);
    } catch (const std::exception& e) {
      fmt::print(stderr, "warning: could not write {}/report.html: {}\n", train_.out, e.what());
    }
  }
  return result_;
}

// An epoch's end (or the run's last step): its record (the loop then writes the checkpoint and the encoder file).
void PretrainRun::record_epoch(const train::EpochResult& done) {
  const auto sum = [&](const char* name) {
    const auto it = done.sums.find(name);
    return it == done.sums.end() ? int64_t(0) : int64_t(std::llround(it->second));
  };
  const int64_t masked = sum("masked");
  const double accuracy = double(sum("correct")) / double(std::max<int64_t>(1, masked));
  if (train::MetricsLog* metrics = loop_->metrics())
    metrics->write({{"kind", "epoch"}, {"epoch", done.epoch}, {"step", done.step}, {"train_loss", done.train_loss},
                    {"masked_accuracy", accuracy}, {"masked_tokens", masked}, {"train_seconds", done.seconds},
                    {"real_tokens_per_s", done.real_tokens_per_s}});
  if (!train_.quiet)
    fmt::print(stderr, "epoch {}/{}: masked-token loss {:.4f}, accuracy {:.2f}% ({} masked tokens) | {:.1f}s | {:.0f} "
               "real tok/s\n", done.epoch, epochs_, done.train_loss, 100 * accuracy, masked, done.seconds,
               done.real_tokens_per_s);
}

}  // namespace

std::map<std::string, std::string> PretrainConfig::to_metadata() const {
  std::map<std::string, std::string> meta = train.to_metadata();
  meta["pretrain_steps"] = std::to_string(steps);
  meta["mask_rates"] = fmt::format("{},{},{}", rates.choose, rates.to_mask, rates.to_random);
  return meta;
}

PretrainCheckpoint check_pretrain_checkpoint(const std::string& path) {
  nn::Metadata meta;
  nn::TensorMap tensors = nn::load_weights(path, &meta);  // a NaN or an infinity is refused, naming the tensor
  PretrainState state;
  PretrainCheckpoint read = checked_read(path, std::move(tensors), meta, state);
  Generator gen(0);
  MaskedTokenModel model(read.config.train.model, gen);
  optim::AdamW optimizer(parameter_groups(model, read.config.train.weight_decay), read.config.train.lr);
  load_pretrain_state(path, read.tensors, meta, read.step, model, optimizer);
  read.parameters = model.num_parameters();
  return read;
}

std::string rebuild_pretrain_report(const std::string& folder) {
  const std::string path = folder + "/checkpoint.safetensors";
  std::error_code error;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, error))) {
    const PretrainCheckpoint read = check_pretrain_checkpoint(path);
    write_pretrain_report(folder, read.config.to_metadata(), read.parameters);
  } else {  // an encoder kept without its checkpoint: its settings (no --steps or masking rates recorded there)
    const PretrainedEncoder encoder = load_encoder(folder, "report");
    Generator gen(0);
    write_pretrain_report(folder, encoder.config.to_metadata(), MaskedTokenModel(encoder.config.model, gen).num_parameters());
  }
  return folder + "/report.html";
}

Data prepare_pretraining_data(const TrainConfig& config) {
  TrainConfig whole = config;
  whole.model.max_len = limits::max_len;  // every review whole: the windows cut them
  whole.truncate = "head";
  Data data = prepare_data(whole);
  // Pretraining reads the training reviews alone.
  data.test_tokens.clear();
  data.test_labels.clear();
  data.test_lengths.clear();
  data.validation_tokens.clear();
  data.validation_labels.clear();
  return data;
}

PretrainResult pretrain(const PretrainConfig& config, const Data& data, distributed::ProcessGroup& world) {
  return PretrainRun(config, data, world).run();
}

PretrainResult pretrain(const PretrainConfig& config, distributed::ProcessGroup& world) {
  config.train.validate();
  distributed::on_root(world, [&] { train::check_output_folder(config.train.out); });
  checked_device(config.train.device);
  if (!config.train.quiet && world.rank() == 0) fmt::print(stderr, "Loading IMDb (training reviews)...\n");
  if (config.train.data.empty() && world.size() > 1)
    distributed::on_root(world, [&] {
      ensure_imdb_downloaded(config.train.data_dir.empty() ? default_data_dir() : config.train.data_dir);
    });
  Data data = prepare_pretraining_data(config.train);
  return pretrain(config, data, world);
}

}  // namespace ember::imdb
