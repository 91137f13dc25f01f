// The IMDb trainer's training loop: train(config, data, world) is one TrainingRun, whose constructor sets
// the run up (model, optimiser, batches, schedule, a resumed checkpoint, the metrics file, the ranks'
// gradient exchange, the kind of step: train_step.h) and whose run() trains epoch after epoch.
#include <sys/resource.h>

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

#include "core/allocator.h"
#include "core/cpu_info.h"
#include "core/distributed/agreement.h"
#include "core/distributed/world.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/encoder_file.h"
#include "examples/imdb/graph_step.h"
#include "optim/train/progress.h"
#include "examples/imdb/report.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/train_step.h"
#include "examples/imdb/trainer.h"
#include "nn/checkpoint.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/sharded_adamw.h"

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

nlohmann::ordered_json step_record(int64_t step, int64_t epoch, double loss, double lr) {
  return {{"kind", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}};
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
  struct PendingLoss {  // a step's loss not read yet (on a GPU, reading it makes the host wait)
    int64_t step, epoch;
    double lr;
    Tensor loss;                  // this process's loss, read when needed
    std::optional<double> value;  // several ranks: the whole batch's, already read
  };

  Device choose_device() const;
  void resume_from_checkpoint();
  void print_setup() const;
  bool train_epoch(int64_t epoch);  // false: the run stops in it (a signal, --stop-after), checkpointed
  StepBatch batch_at(const std::vector<int64_t>& order, int64_t b) const;
  Tensor next_loss_slot();
  void end_epoch(int64_t epoch, double train_seconds, int64_t real_tokens, int64_t padded_tokens);
  void report_best_validation_epoch();
  void finish();
  void read_losses();
  void save();  // collective: every rank gathers the state (ZeRO-1's moments live in shards); rank 0 writes it

  TrainConfig config_;
  const Data& data_;
  distributed::ProcessGroup& world_;
  const bool lead_;     // rank 0: prints, and writes every file
  const bool several_;  // more than one rank
  Device device_;
  std::optional<train::RunLock> lock_;  // one trainer (job) per folder, for the whole run
  std::optional<train::StopSignals> signals_;  // SIGINT / SIGTERM: checkpoint at the next step boundary, then stop
  std::optional<MixedPrecisionGuard> precision_;  // --precision bf16: products in bfloat16, the rest float32
  Generator gen_;                                 // initialisation, then dropout masks
  std::optional<nn::TransformerClassifier> model_;
  std::unique_ptr<distributed::ProcessGroup> nccl_;  // gradients over NCCL between GPUs (its id sent over MPI)
  distributed::ProcessGroup* group_ = nullptr;       // the group gradients travel in: world_ or nccl_
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<Batcher> batcher_;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  optim::Schedule schedule_;
  CheckpointInfo state_;  // the run's state between steps: what a checkpoint holds besides the tensors
  std::string checkpoint_path_, model_path_;
  std::optional<train::MetricsLog> metrics_;
  std::optional<nn::DataParallel> dp_;
  bool pad_for_graph_ = false;
  std::unique_ptr<TrainStep> step_;  // of the kind the settings choose (train_step.h)
  std::vector<PendingLoss> pending_;
  // On one GPU: the pending steps' losses, in order, on the GPU (float32 [capacity]); a logging
  // step reads them all with one copy and one wait (read_losses), not one of each per step.
  // Without it (the CPU, several ranks) each step's loss is read at once.
  Tensor loss_log_;
  train::Progress progress_;
  RunResult result_;
};

TrainingRun::TrainingRun(const TrainConfig& config_in, const Data& data, distributed::ProcessGroup& world)
    : config_(config_in), data_(data), world_(world), lead_(world.rank() == 0), several_(world.size() > 1),
      gen_(config_in.seed),
      progress_(config_in.quiet || !lead_ ? train::Progress::Mode::Silent : train::Progress::detect(), config_in.log_every) {
  config_.model.vocab_size = data.vocabulary.size();
  config_.validate();
  if (!lead_) config_.quiet = true;
  distributed::check_same_settings(world_, config_.shared_settings());
  device_ = choose_device();
  EMBER_CHECK(!data_.train_tokens.empty(), "train: there are no training reviews");
  distributed::on_root(world_, [&] {
    train::check_output_folder(config_.out);
    lock_.emplace(config_.out);
    check_init_is_not_out(config_);
    check_run_folder_kind(config_.out, RunKind::classifier, "train", config_.overwrite, config_.resume);
    check_run_files_writable(config_.out, {"vocab.txt", "metrics.jsonl", "checkpoint.safetensors", "model.safetensors"});
  });
  signals_.emplace();
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
    metrics_.emplace(config_.out + "/metrics.jsonl", config_.resume, state_.step);
  });
  // Rank 0's parameters to every rank (equal already: same seed, same checkpoint); gradients
  // averaged over the ranks during backward. Nothing to send on one process.
  dp_.emplace(*model_, *group_, nn::DataParallelOptions{.bucket_bytes = config_.bucket_kb * 1024,
                                                        .overlap = config_.overlap, .reduce_gradients = !config_.zero});
  // --cuda-graph on: batches padded to a multiple of 32 tokens (graph_step.h), whichever kind of step
  // takes them: on one GPU its CUDA graphs, one per padded shape; elsewhere the same numbers op by op.
  pad_for_graph_ = config_.uses_cuda_graph();
  step_ = make_train_step(config_, *model_, *optimizer_, gen_, device_, world_, *dp_);
  if (step_->loss_on_gpu()) loss_log_ = zeros({std::min(config_.log_every, steps_per_epoch_)}, Dtype::Float32, device_);
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

RunResult TrainingRun::run() {
  const auto run_start = Clock::now();
  // A --resume already at --stop-after trains nothing (it trained one step more).
  const bool at_stop = config_.stop_after > 0 && state_.step >= config_.stop_after;
  while (state_.step < total_steps_ && !at_stop)
    if (!train_epoch(state_.step / steps_per_epoch_)) break;
  result_.steps = state_.step;
  result_.graph_replays = step_->graph_replays();
  report_best_validation_epoch();
  result_.wall_seconds = seconds_since(run_start);
  result_.finished = state_.step == total_steps_;
  if (result_.stopped_by_signal != 0) return result_;  // checkpointed; the report can wait for the resume
  finish();
  return result_;
}

bool TrainingRun::train_epoch(int64_t epoch) {
  int64_t& step = state_.step;
  std::vector<int64_t> order = config_.length_buckets > 0
                                   ? batcher_->length_bucketed_order(config_.seed, epoch, config_.length_buckets)
                                   : batcher_->shuffled_order(config_.seed, epoch);
  model_->train();
  reset_peak_memory();
  if (device_.is_cuda()) reset_peak_memory(device_);
  int64_t real_tokens = 0, padded_tokens = 0;  // the whole batches' (every rank's) tokens, for throughput
  bool stop = false;
  const auto epoch_start = Clock::now();
  progress_.start_epoch(epoch + 1, config_.epochs, steps_per_epoch_);
  const int64_t first = step % steps_per_epoch_;
  for (int64_t b = first; b < steps_per_epoch_; ++b) {
    if (const int signal = step_->stop_signal()) {  // on several ranks, the same step on each
      result_.stopped_by_signal = signal;
      stop = true;
      break;
    }
    if (b == first) step_->stage(batch_at(order, b));  // an epoch's first batch: staged just before its step
    optimizer_->set_lr(schedule_.lr_at(step));
    const StepResult done = step_->run(loss_log_.defined() ? next_loss_slot() : Tensor());
    // The lookahead: on one GPU, batch b + 1 goes up on the copy stream while step b runs.
    if (b + 1 < steps_per_epoch_) step_->stage(batch_at(order, b + 1));
    ++step;
    pending_.push_back({step, epoch + 1, optimizer_->lr(), done.loss, done.whole_batch_loss});
    real_tokens += done.real_tokens;
    padded_tokens += done.padded_tokens;
    // An epoch's last step is checkpointed after its evaluation (end_epoch), not here.
    const bool save_now = config_.save_every > 0 && step % config_.save_every == 0 && step % steps_per_epoch_ != 0;
    const bool stop_now = config_.stop_after > 0 && step >= config_.stop_after;
    // On one GPU the losses are read on logging steps and before a save (on a CPU, and on several
    // ranks, every step).
    if (!loss_log_.defined() || (b + 1) % config_.log_every == 0 || b + 1 == steps_per_epoch_ || save_now ||
        stop_now) {
      read_losses();
      double elapsed = seconds_since(epoch_start);
      progress_.update(b + 1, state_.epoch_loss_sum / double(b + 1), double(real_tokens) / elapsed, elapsed);
    }
    if (save_now) save();
    if (stop_now) {
      stop = true;
      break;
    }
  }
  const double train_seconds = seconds_since(epoch_start);
  progress_.finish_epoch();
  if (step != (epoch + 1) * steps_per_epoch_) {  // stopped part-way through the epoch
    save();
    return false;
  }
  end_epoch(epoch, train_seconds, real_tokens, padded_tokens);
  return !stop;
}

// This rank's rows of the global batch b, padded as the whole batch is; dropout draws by global
// example (core/random.h, BatchSlice), so the ranks together compute one process's step.
StepBatch TrainingRun::batch_at(const std::vector<int64_t>& order, int64_t b) const {
  const int64_t batch_rows = batcher_->rows_in(b);
  const distributed::Range rows = distributed::shard_range(batch_rows, world_.rank(), world_.size());
  Batch batch = batcher_->batch_rows(order, b, rows.begin, rows.size());
  if (pad_for_graph_) batch = pad_for_graphs(batch, config_.model.max_len);
  return {std::move(batch), batch_rows, rows.begin};
}

// The epoch's evaluation, its records (metrics.jsonl, the console), then the model and the checkpoint.
void TrainingRun::end_epoch(int64_t epoch, double train_seconds, int64_t real_tokens, int64_t padded_tokens) {
  const auto eval_start = Clock::now();
  EpochResult er;
  er.epoch = epoch + 1;
  er.train_loss = state_.epoch_loss_sum / double(steps_per_epoch_);  // every step of the epoch, resumed or not
  GraphEvaluator* graphs = step_->evaluator();
  er.test_accuracy = evaluate(*model_, data_.test_tokens, data_.test_labels, 64, &world_, graphs);
  if (!data_.validation_tokens.empty())
    er.validation_accuracy = evaluate(*model_, data_.validation_tokens, data_.validation_labels, 64, &world_, graphs);
  er.seconds = train_seconds;
  er.eval_seconds = seconds_since(eval_start);
  er.real_tokens_per_s = double(real_tokens) / train_seconds;
  er.padded_tokens_per_s = double(padded_tokens) / train_seconds;
  er.peak_bytes = memory_stats().peak_allocated;
  er.peak_rss_bytes = peak_rss_bytes();
  if (device_.is_cuda()) {
    MemoryStats gpu = memory_stats(device_);
    er.gpu_allocated_bytes = gpu.allocated;
    er.gpu_peak_bytes = gpu.peak_allocated;
    er.gpu_reserved_bytes = gpu.reserved;
  }
  result_.epochs.push_back(er);
  const nn::DataParallelStats& comm = dp_->stats();
  if (lead_) {
    nlohmann::ordered_json record = epoch_record(er, state_.step, data_.test_tokens.size(), data_.validation_tokens.size());
    if (several_) {  // this rank's share of the communication (nn/data_parallel.h)
      record["ranks"] = world_.size();
      record["allreduce_seconds"] = comm.comm_seconds;
      record["allreduce_exposed_seconds"] = comm.exposed_seconds;
      record["allreduce_bytes"] = comm.bytes;
    }
    metrics_->write(record);
    if (device_.is_cuda())
      metrics_->write({{"kind", "gpu_memory"}, {"epoch", er.epoch}, {"device", device_.str()},
                       {"allocated_bytes", er.gpu_allocated_bytes}, {"peak_bytes", er.gpu_peak_bytes},
                       {"reserved_bytes", er.gpu_reserved_bytes}});
  }
  if (!config_.quiet)
    fmt::print(stderr,
               "epoch {}/{}: train loss {:.4f} | test accuracy {:.2f}% ({} reviews){} | {:.1f}s train + {:.1f}s eval | "
               "{:.0f} real tok/s ({:.0f} padded) | peak {:.0f} MiB tensors, {:.0f} MiB RSS\n",
               er.epoch, config_.epochs, er.train_loss, 100 * er.test_accuracy, data_.test_tokens.size(),
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
  // The model, then the checkpoint: a checkpoint at an epoch's end always has its evaluation line
  // in metrics.jsonl and its model.safetensors beside it (a kill between the two redoes the epoch's
  // end from the checkpoint before).
  distributed::on_root(world_, [&] {
    metrics_->flush();
    save_model(model_path_, config_, *model_, data_.vocabulary);
  });
  state_.epoch_loss_sum = 0;
  save();
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
    fmt::print(stderr, "best epoch by validation accuracy: {} (validation {:.2f}%, test {:.2f}%)\n", best->epoch,
               100 * best->validation_accuracy, 100 * best->test_accuracy);
}

// The end of a run that was not stopped by a signal: its final accuracy, and (rank 0) the report.
void TrainingRun::finish() {
  if (result_.finished) {
    // A resume of a finished run: the last evaluation from metrics.jsonl, else evaluated again
    // (collective: rank 0 says whether it is needed).
    double recorded_accuracy = NAN;
    if (!result_.epochs.empty()) {
      recorded_accuracy = result_.epochs.back().test_accuracy;
    } else {
      distributed::on_root(world_, [&] {
        metrics_->flush();
        std::error_code error;
        if (!fs::exists(model_path_, error))  // its model file was lost
          save_model(model_path_, config_, *model_, data_.vocabulary);
        nlohmann::json last = train::last_epoch_record(metrics_->path());
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
  metrics_->flush();
  // The report is a by-product: when it cannot be written, the run has still succeeded.
  try {
    model_->to(Device::cpu());  // the report's attention maps are computed on the CPU
    write_run_report(config_.out, config_, *model_, data_);
    if (!config_.quiet) fmt::print(stderr, "Report: {}/report.html\n", config_.out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: could not write {}/report.html: {}\n", config_.out, e.what());
  }
}

// The loss log's slot for the next step's loss (read_losses empties it: a full log is read first).
Tensor TrainingRun::next_loss_slot() {
  if (int64_t(pending_.size()) == loss_log_.numel()) read_losses();
  return loss_log_.narrow(0, int64_t(pending_.size()), 1);
}

void TrainingRun::read_losses() {
  std::vector<float> logged;  // on one GPU: every pending loss, in one copy
  if (loss_log_.defined() && !pending_.empty())
    logged = loss_log_.narrow(0, 0, int64_t(pending_.size())).to(Device::cpu()).to_vector<float>();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const PendingLoss& p = pending_[i];
    const double loss_value = p.value ? *p.value : !logged.empty() ? double(logged[i]) : double(p.loss.item<float>());
    // Several ranks read the same whole-batch loss: they fail together, rank 0 reports it.
    on_every_rank_alike(world_, [&] {
      EMBER_CHECK(std::isfinite(loss_value), "training diverged: the loss at step {} (epoch {}) is {}; that step is "
                  "not saved and the last checkpoint is kept (lower --lr, or clip with --clip)", p.step, p.epoch,
                  loss_value);
    });
    result_.step_losses.push_back(loss_value);
    state_.epoch_loss_sum += loss_value;
    if (lead_) metrics_->write(step_record(p.step, p.epoch, loss_value, p.lr));
  }
  pending_.clear();
}

void TrainingRun::save() {
  read_losses();
  if (several_) dp_->check_replicas_agree();
  state_.generator_offset = gen_.offset();
  const nn::TensorMap optimizer_state = optimizer_->state_dict();
  distributed::on_root(world_, [&] {
    metrics_->flush();  // every step the checkpoint covers is in metrics.jsonl first (a resume keeps exactly those)
    save_checkpoint(checkpoint_path_, config_, state_, *model_, optimizer_state);
  });
}

}  // namespace

RunResult train_classifier(const TrainConfig& config, const Data& data, distributed::ProcessGroup& world) {
  return TrainingRun(config, data, world).run();
}


}  // namespace ember::imdb
