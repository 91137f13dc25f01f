// The IMDb classifier's training: train_classifier(config, data, world) is one TrainingRun, whose constructor sets
// the run up (model, optimiser, batches, schedule, a resumed checkpoint, the ranks' gradient exchange, the kind
// of step: train_step.h) and whose run() hands it to the training layer's loop (optim/train/loop.h), with what
// this program adds: its checkpoint format, its epoch records, its model file after each epoch, its report.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu_info.h"
#include "core/distributed/agreement.h"
#include "core/distributed/world.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/encoder_file.h"
#include "examples/imdb/report.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/train_step.h"
#include "examples/imdb/trainer.h"
#include "nn/checkpoint.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/sharded_adamw.h"
#include "optim/train/device_step.h"
#include "optim/train/graph_eval.h"
#include "optim/train/loop.h"
#include "optim/train/run_folder.h"

namespace ember::imdb {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

nlohmann::ordered_json epoch_record(const EpochResult& er, int64_t step, size_t test_reviews,
                                    size_t validation_reviews) {
  nlohmann::ordered_json record = {{"kind", "epoch"},
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
  if (std::isnan(er.test_accuracy)) {  // --test end: the test reviews are read once, after the last epoch
    record.erase("test_accuracy");
    record.erase("test_reviews");
  }
  if (validation_reviews > 0) {
    record["validation_accuracy"] = er.validation_accuracy;
    record["validation_reviews"] = validation_reviews;
  }
  return record;
}

// Runs fn on every rank. Its inputs are the same on every rank (the settings, the data, the
// checkpoint rank 0 read), so an error it raises is raised by every rank at once: an agreed one,
// which ends the job normally with rank 0 reporting it.
template <typename Fn>
void on_every_rank_alike(distributed::ProcessGroup& world, Fn&& fn) {
  try {
    fn();
  } catch (const distributed::AgreedError&) {
    throw;
  } catch (const Error& e) {
    if (world.size() > 1) throw distributed::AgreedError(e.what());
    throw;
  }
}

// One run of train(): the pieces it holds for the whole run (model, optimiser, batches, schedule, the
// state a checkpoint keeps, the metrics file, the ranks' gradient exchange, the step), set up by the
// constructor, and its phases as methods: run() trains epoch after epoch (train_epoch: the steps;
// end_epoch: evaluation, records, the model and the checkpoint), then finish().
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config_in, const Data& data, distributed::ProcessGroup& world);
  RunResult run();

 private:
  Device choose_device() const;
  void resume_from_checkpoint();
  void print_setup() const;
  train::LoopSettings loop_settings();
  StepBatch batch_at(const train::StepAt& at);
  void record_epoch(const train::EpochResult& done);
  void report_best_validation_epoch();
  void finish();
  void save(const train::RunState& at);  // collective: every rank gathers the state (ZeRO-1's moments live in shards); rank 0 writes it

  TrainConfig config_;
  const Data& data_;
  distributed::ProcessGroup& world_;
  const bool lead_;     // rank 0: prints, and writes every file
  const bool several_;  // more than one rank
  Device device_;
  std::optional<train::RunFolder> folder_;  // one trainer (job) per folder, for the whole run; SIGINT / SIGTERM
  std::optional<MixedPrecisionGuard> precision_;  // --precision bf16: products in bfloat16, the rest float32
  Generator gen_;                                 // initialisation, then dropout masks
  std::optional<nn::TransformerClassifier> model_;
  std::unique_ptr<distributed::ProcessGroup> nccl_;  // gradients over NCCL between GPUs (its id sent over MPI)
  distributed::ProcessGroup* group_ = nullptr;       // the group gradients travel in: world_ or nccl_
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<Batcher> batcher_;
  std::vector<int64_t> order_;  // the epoch's order of the batches (batch_at)
  int64_t order_epoch_ = -1;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  optim::Schedule schedule_;
  CheckpointInfo state_;  // the run's state at its start (a resume's): what a checkpoint holds besides the tensors
  std::string checkpoint_path_, model_path_;
  std::optional<nn::DataParallel> dp_;
  bool pad_for_graph_ = false;
  std::unique_ptr<train::Step> step_;  // of the kind the settings choose (train_step.h)
  std::optional<train::GraphEvaluator> eval_graphs_;  // --cuda-graph on, one GPU: the evaluations as graphs
  std::optional<train::Loop> loop_;
  RunResult result_;
};

TrainingRun::TrainingRun(const TrainConfig& config_in, const Data& data, distributed::ProcessGroup& world)
    : config_(config_in), data_(data), world_(world), lead_(world.rank() == 0), several_(world.size() > 1),
      gen_(config_in.seed) {
  config_.model.vocab_size = data.vocabulary.size();
  config_.validate();
  if (!lead_) config_.quiet = true;
  distributed::check_same_settings(world_, config_.shared_settings());
  device_ = choose_device();
  EMBER_CHECK(!data_.train_tokens.empty(), "train: there are no training reviews");
  distributed::on_root(world_, [&] {
    folder_.emplace(config_.out, &world_);  // made and locked
    check_init_is_not_out(config_);
    check_run_folder_kind(config_.out, RunKind::classifier, "train", config_.overwrite, config_.resume);
    check_run_files_writable(config_.out, {"vocab.txt", "metrics.jsonl", "checkpoint.safetensors", "model.safetensors"});
  });
  if (!lead_) folder_.emplace(config_.out, &world_);  // (signals caught on every rank)
  if (config_.threads > 0) {
    set_num_threads(config_.threads);
  } else if (several_) {  // the ranks on this machine share its cores
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / std::max(1, distributed::launch_info().local_size)));
  }
  precision_.emplace(parse_precision(config_.precision));

  check_zero_has_ranks(config_.zero, device_, several_);
  model_.emplace(config_.model, gen_);
  // --init (not on a resume, whose checkpoint holds the weights): the encoder's weights, checked against these settings
  if (!config_.init.empty() && !config_.resume) {
    const PretrainedEncoder encoder = load_encoder(config_.init);
    const std::string warning = init_from_encoder(encoder, config_, data_, *model_);
    if (lead_ && !warning.empty()) fmt::print(stderr, "warning: {}\n", warning);
    if (!config_.quiet)
      fmt::print(stderr, "Encoder: {}/{} ({})\n", config_.init, kEncoderFile,
                 encoder.step < 0 ? std::string("no checkpoint beside it to give its step")
                                  : fmt::format("pretraining step {} of {}", encoder.step, encoder.total_steps));
  }
  model_->to(device_);  // initialised on the CPU, so the same seed gives the same weights on every device
  group_ = &gradient_group(world_, device_, config_.dist_timeout, nccl_);
  if (config_.zero)  // ZeRO-1: clips by the global norm itself, over every rank's shard
    optimizer_ = std::make_unique<optim::ShardedAdamW>(parameter_groups(*model_, config_.weight_decay, config_.encoder_lr_scale), *group_,
                                                       config_.lr, config_.clip);
  else
    optimizer_ = std::make_unique<optim::AdamW>(parameter_groups(*model_, config_.weight_decay, config_.encoder_lr_scale), config_.lr);
  batcher_.emplace(data_.train_tokens, data_.train_labels, config_.batch_size);
  steps_per_epoch_ = batcher_->num_batches();
  EMBER_CHECK(!__builtin_mul_overflow(steps_per_epoch_, config_.epochs, &total_steps_) &&
                  total_steps_ <= optim::Optimizer::max_steps,
              "train: {} epochs of {} steps are more steps than a run can count", config_.epochs, steps_per_epoch_);
  schedule_ = optim::Schedule{optim::parse_schedule(config_.schedule), config_.lr,
                              int64_t(std::llround(config_.warmup * double(total_steps_))), total_steps_};

  state_.total_steps = total_steps_;
  state_.data_fingerprint = data_fingerprint(data_);
  checkpoint_path_ = config_.out + "/checkpoint.safetensors";
  model_path_ = config_.out + "/model.safetensors";
  if (config_.resume) resume_from_checkpoint();
  distributed::on_root(world_, [&] {
    if (config_.overwrite) remove_run_files(config_.out);  // every check has passed: what was there goes
    data_.vocabulary.save(config_.out + "/vocab.txt");
  });
  // Rank 0's parameters to every rank (equal already: same seed, same checkpoint); gradients
  // averaged over the ranks during backward. Nothing to send on one process.
  dp_.emplace(*model_, *group_, nn::DataParallelOptions{.bucket_bytes = config_.bucket_kb * 1024,
                                                        .overlap = config_.overlap, .reduce_gradients = !config_.zero});
  // --cuda-graph on: batches padded to a multiple of 32 tokens (batcher.h), whichever kind of step
  // takes them: on one GPU its CUDA graphs, one per padded shape; elsewhere the same numbers op by op.
  pad_for_graph_ = config_.uses_cuda_graph();
  step_ = make_train_step(config_, *model_, *optimizer_, gen_, device_, world_, *dp_,
                          [this](const train::StepAt& at) { return batch_at(at); });
  if (pad_for_graph_ && steps_on_one_gpu(config_, device_, world_))
    eval_graphs_.emplace(device_, array_layout(config_.model),
                         [this](const train::DeviceBatch& batch) { return right_predictions(*model_, batch); });
  loop_.emplace(*model_, *optimizer_, loop_settings());
  result_.parameters = model_->num_parameters();
  result_.total_steps = total_steps_;
  print_setup();
}

Device TrainingRun::choose_device() const {
  const Device device = rank_device(config_.device, several_);
  EMBER_CHECK(!config_.uses_cuda_graph() || device.is_cuda(), "--cuda-graph on: CUDA graphs need a GPU (--device cuda), "
              "not --device {}", config_.device);
  return device;
}

// Everything is checked before any file of the folder is written: a refused resume changes nothing.
// Rank 0 reads the file and sends it to every rank; it holds whole tensors (the optimiser's too,
// under ZeRO-1), so any number of ranks can resume it.
void TrainingRun::resume_from_checkpoint() {
  distributed::on_root(world_, [&] { check_resume_has_checkpoint(checkpoint_path_, "train"); });
  CheckpointInfo saved = restore_checkpoint(checkpoint_path_, config_, *model_, *optimizer_, world_);  // onto the model's device
  on_every_rank_alike(world_, [&] {
    EMBER_CHECK(saved.data_fingerprint == state_.data_fingerprint,
                "resume: {} was trained on other data (its vocabulary or reviews differ from these); give the same "
                "--data and --limit, or a new --out", checkpoint_path_);
    EMBER_CHECK(saved.total_steps == total_steps_, "resume: {} is of a run of {} steps, these settings and data make {}",
                checkpoint_path_, saved.total_steps, total_steps_);
  });
  state_ = saved;
  gen_.set_state(config_.seed, state_.generator_offset);
}

void TrainingRun::print_setup() const {
  if (config_.quiet) return;
  fmt::print(stderr, "Model: {} heads, {} layers, dim {}, {} parameters; {} train / {} test reviews; {} steps; {}{} threads\n",
             config_.model.heads, config_.model.layers, config_.model.dim, result_.parameters,
             data_.train_tokens.size(), data_.test_tokens.size(), total_steps_,
             several_ ? fmt::format("{} ranks ({}{}) x ", world_.size(), group_->backend(), config_.zero ? ", ZeRO-1" : "")
                      : std::string(),
             num_threads());
  if (device_.is_cpu()) fmt::print(stderr, "CPU: {}\n", cpu_summary());  // the target and kernels: core/cpu_info.h
  if (config_.precision == "bf16")
    fmt::print(stderr, "Precision: {}, float32 weights and optimiser\n",
               device_.is_cpu() ? fmt::format("products and activations in bfloat16 (CPU kernel {})", bf16_product_kernel())
                                : std::string("products in bfloat16"));
}

// What the loop does for this run: its steps and epochs, the schedule, the checkpoints (this program's format,
// save below), the evaluations (test, and validation when held out), the records (record_epoch), the model file
// after each epoch's records and before its checkpoint.
train::LoopSettings TrainingRun::loop_settings() {
  train::LoopSettings s = loop_settings_of(config_, *folder_, world_);
  s.steps = total_steps_;
  s.steps_per_epoch = steps_per_epoch_;
  s.schedule = schedule_;
  s.device = device_;
  s.generator = &gen_;
  const auto accuracy_on = [this](const std::vector<std::vector<int32_t>>& reviews, const std::vector<int>& labels) {
    return evaluate(*model_, reviews, labels, 64, &world_, eval_graphs_ ? &*eval_graphs_ : nullptr);
  };
  // The test reviews after every epoch, or (--test end; by default with a validation set) once, at the end.
  s.evaluations.push_back({"test_accuracy", [=, this] { return accuracy_on(data_.test_tokens, data_.test_labels); },
                           /*every_epoch=*/config_.tests_every_epoch(), /*percent=*/true});
  if (!data_.validation_tokens.empty())
    s.evaluations.push_back({"validation_accuracy",
                             [=, this] { return accuracy_on(data_.validation_tokens, data_.validation_labels); },
                             /*every_epoch=*/true, /*percent=*/true});
  s.write_checkpoint = [this](const train::RunState& at) { save(at); };
  s.record_epoch = [this](const train::EpochResult& done) { record_epoch(done); };
  // The model, then the checkpoint: a checkpoint at an epoch's end always has its evaluation line in
  // metrics.jsonl and its model.safetensors beside it (a kill between the two redoes the epoch's end from the
  // checkpoint before).
  s.after_epoch = [this](int64_t) {
    distributed::on_root(world_, [&] {
      loop_->metrics()->flush();
      save_model(model_path_, config_, *model_, data_.vocabulary);
    });
  };
  return s;
}

RunResult TrainingRun::run() {
  const auto run_start = Clock::now();
  const train::LoopResult trained =
      loop_->run(*step_, {state_.step, total_steps_, state_.generator_offset, state_.epoch_loss_sum});
  result_.steps = trained.steps;
  result_.finished = trained.finished;
  result_.stopped_by_signal = trained.stopped_by_signal;
  result_.step_losses = trained.step_losses;
  const auto tested_once = trained.final_evaluations.find("test_accuracy");  // --test end
  if (tested_once != trained.final_evaluations.end()) result_.final_test_accuracy = tested_once->second;
  if (const auto* on_gpu = dynamic_cast<const train::DeviceStep*>(step_.get()))
    result_.graph_replays = on_gpu->graph_counts().replays;
  report_best_validation_epoch();
  result_.wall_seconds = seconds_since(run_start);
  if (result_.stopped_by_signal != 0) return result_;  // checkpointed; the report can wait for the resume
  finish();
  return result_;
}

// This rank's rows of the global batch at step `at`, padded as the whole batch is; dropout draws by global
// example (core/random.h, BatchSlice), so the ranks together compute one process's step.
StepBatch TrainingRun::batch_at(const train::StepAt& at) {
  if (at.epoch != order_epoch_) {
    order_ = config_.length_buckets > 0 ? batcher_->length_bucketed_order(config_.seed, at.epoch, config_.length_buckets)
                                        : batcher_->shuffled_order(config_.seed, at.epoch);
    order_epoch_ = at.epoch;
  }
  const int64_t b = at.index;
  const int64_t batch_rows = batcher_->rows_in(b);
  const distributed::Range rows = distributed::shard_range(batch_rows, world_.rank(), world_.size());
  Batch batch = batcher_->batch_rows(order_, b, rows.begin, rows.size());
  if (pad_for_graph_) batch = pad_for_graphs(batch, config_.model.max_len);
  return {std::move(batch), batch_rows, rows.begin};
}

// The epoch's records: metrics.jsonl and the console.
void TrainingRun::record_epoch(const train::EpochResult& done) {
  EpochResult er;
  er.epoch = done.epoch;
  er.train_loss = done.train_loss;
  const auto tested = done.evaluations.find("test_accuracy");
  er.test_accuracy = tested != done.evaluations.end() ? tested->second : NAN;  // NaN: --test end
  if (!data_.validation_tokens.empty()) er.validation_accuracy = done.evaluations.at("validation_accuracy");
  er.seconds = done.seconds;
  er.eval_seconds = done.eval_seconds;
  er.real_tokens_per_s = done.real_tokens_per_s;
  er.padded_tokens_per_s = done.padded_tokens_per_s;
  er.peak_bytes = done.peak_bytes;
  er.peak_rss_bytes = done.peak_rss_bytes;
  er.gpu_allocated_bytes = done.gpu_allocated_bytes;
  er.gpu_peak_bytes = done.gpu_peak_bytes;
  er.gpu_reserved_bytes = done.gpu_reserved_bytes;
  result_.epochs.push_back(er);
  const nn::DataParallelStats& comm = dp_->stats();
  if (train::MetricsLog* metrics = loop_->metrics()) {
    nlohmann::ordered_json record = epoch_record(er, done.step, data_.test_tokens.size(), data_.validation_tokens.size());
    if (several_) {  // this rank's share of the communication (nn/data_parallel.h)
      record["ranks"] = world_.size();
      record["allreduce_seconds"] = comm.comm_seconds;
      record["allreduce_exposed_seconds"] = comm.exposed_seconds;
      record["allreduce_bytes"] = comm.bytes;
    }
    metrics->write(record);
    if (device_.is_cuda())
      metrics->write({{"kind", "gpu_memory"}, {"epoch", er.epoch}, {"device", device_.str()},
                      {"allocated_bytes", er.gpu_allocated_bytes}, {"peak_bytes", er.gpu_peak_bytes},
                      {"reserved_bytes", er.gpu_reserved_bytes}});
  }
  if (!config_.quiet)
    fmt::print(stderr,
               "epoch {}/{}: train loss {:.4f}{}{} | {:.1f}s train + {:.1f}s eval | "
               "{:.0f} real tok/s ({:.0f} padded) | peak {:.0f} MiB tensors, {:.0f} MiB RSS\n",
               er.epoch, config_.epochs, er.train_loss,
               std::isnan(er.test_accuracy) ? std::string()
                   : fmt::format(" | test accuracy {:.2f}% ({} reviews)", 100 * er.test_accuracy, data_.test_tokens.size()),
               data_.validation_tokens.empty() ? std::string()
                   : fmt::format(" | validation {:.2f}% ({} reviews)", 100 * er.validation_accuracy,
                                 data_.validation_tokens.size()),
               er.seconds, er.eval_seconds, er.real_tokens_per_s, er.padded_tokens_per_s, er.peak_bytes / 1048576.0,
               er.peak_rss_bytes / 1048576.0);
  if (!config_.quiet && several_ && comm.steps > 0)
    fmt::print(stderr, "epoch {}/{}: all-reduce {:.1f} ms per step, {:.0f}% of it hidden behind backward, {:.1f} MB "
               "per step (rank 0)\n", er.epoch, config_.epochs, 1e3 * comm.comm_seconds / double(comm.steps),
               100 * comm.hidden_share(), double(comm.bytes) / double(comm.steps) / 1e6);
  if (!config_.quiet && device_.is_cuda())
    fmt::print(stderr, "epoch {}/{}: {} memory: {:.1f} MiB allocated, {:.1f} MiB peak, {:.1f} MiB reserved\n", er.epoch,
               config_.epochs, device_.str(), er.gpu_allocated_bytes / 1048576.0, er.gpu_peak_bytes / 1048576.0,
               er.gpu_reserved_bytes / 1048576.0);
}

// --validation: the epoch it would choose (the first of equals).
void TrainingRun::report_best_validation_epoch() {
  const EpochResult* best = nullptr;
  for (const EpochResult& er : result_.epochs)
    if (!std::isnan(er.validation_accuracy) && (best == nullptr || er.validation_accuracy > best->validation_accuracy))
      best = &er;
  if (best == nullptr) return;
  result_.best_validation_epoch = best->epoch;
  if (!config_.quiet)
    fmt::print(stderr, "best epoch by validation accuracy: {} (validation {:.2f}%{})\n", best->epoch,
               100 * best->validation_accuracy,
               std::isnan(best->test_accuracy) ? std::string() : fmt::format(", test {:.2f}%", 100 * best->test_accuracy));
}

// The end of a run that was not stopped by a signal: its final accuracy, and (rank 0) the report.
void TrainingRun::finish() {
  if (result_.finished) {
    // A resume of a finished run: the last evaluation from metrics.jsonl, else evaluated again
    // (collective: rank 0 says whether it is needed).
    double recorded_accuracy = NAN;
    if (!result_.epochs.empty()) {  // (--test end: read once at the end, after the last epoch)
      recorded_accuracy = config_.tests_every_epoch() ? result_.epochs.back().test_accuracy : result_.final_test_accuracy;
    } else {
      distributed::on_root(world_, [&] {
        loop_->metrics()->flush();
        std::error_code error;
        if (!fs::exists(model_path_, error))  // its model file was lost
          save_model(model_path_, config_, *model_, data_.vocabulary);
        nlohmann::json last = train::last_epoch_record(loop_->metrics()->path());
        if (last.is_object() && last.value("epoch", int64_t(0)) == config_.epochs && last["test_accuracy"].is_number())
          recorded_accuracy = last["test_accuracy"].get<double>();
      });
      if (several_) {
        Tensor value = from_vector(std::vector<double>{lead_ ? recorded_accuracy : 0.0});
        world_.broadcast(value, 0);
        recorded_accuracy = value.item<double>();
      }
    }
    result_.final_test_accuracy = std::isnan(recorded_accuracy)
                                      ? evaluate(*model_, data_.test_tokens, data_.test_labels, 64, &world_)
                                      : recorded_accuracy;
  }
  if (!lead_) return;
  loop_->metrics()->flush();
  // The report is a by-product: when it cannot be written, the run has still succeeded.
  try {
    model_->to(Device::cpu());  // the report's attention maps are computed on the CPU
    write_run_report(config_.out, config_, *model_, data_);
    if (!config_.quiet) fmt::print(stderr, "Report: {}/report.html\n", config_.out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: could not write {}/report.html: {}\n", config_.out, e.what());
  }
}

// The checkpoint at `at` (the loop has read and logged every step it covers).
void TrainingRun::save(const train::RunState& at) {
  if (several_) dp_->check_replicas_agree();
  CheckpointInfo info = state_;
  info.step = at.step;
  info.generator_offset = at.generator_offset;
  info.epoch_loss_sum = at.epoch_loss_sum;
  const nn::TensorMap optimizer_state = optimizer_->state_dict();
  distributed::on_root(world_, [&] { save_checkpoint(checkpoint_path_, config_, info, *model_, optimizer_state); });
}

}  // namespace

RunResult train_classifier(const TrainConfig& config, const Data& data, distributed::ProcessGroup& world) {
  return TrainingRun(config, data, world).run();
}


}  // namespace ember::imdb
