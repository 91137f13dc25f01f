// The training loop every trainer shares (loop.h): Loop::train_epoch is the whole of a run's steps, from top to
// bottom; the plain kind of step is HostStep (host_step.h).
#include "optim/train/loop.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/distributed/agreement.h"
#include "core/error.h"
#include "optim/train/host_step.h"
#include "optim/train/progress.h"

namespace ember::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

// Runs fn on every rank. An error it raises is raised by every rank at once (its inputs are the same on every
// rank): an agreed one, which ends the job normally with rank 0 reporting it.
template <typename Fn>
void on_every_rank_alike(distributed::ProcessGroup* world, Fn&& fn) {
  try {
    fn();
  } catch (const distributed::AgreedError&) {
    throw;
  } catch (const Error& e) {
    if (world != nullptr && world->size() > 1) throw distributed::AgreedError(e.what());
    throw;
  }
}

}  // namespace

Loop::Loop(nn::Module& model, optim::Optimizer& optimizer, LoopSettings settings)
    : model_(model), optimizer_(optimizer), settings_(std::move(settings)) {
  const LoopSettings& s = settings_;
  EMBER_CHECK(s.steps >= 1 && s.steps <= optim::Optimizer::max_steps, "train::Loop: steps must be at least 1, not {}",
              s.steps);
  EMBER_CHECK(s.steps_per_epoch >= 0, "train::Loop: steps_per_epoch must be >= 0, not {}", s.steps_per_epoch);
  EMBER_CHECK(s.save_every >= 0 && s.stop_after >= 0 && s.log_every >= 1 && s.clip >= 0,
              "train::Loop: save_every and stop_after must be >= 0, log_every >= 1 and clip >= 0");
  EMBER_CHECK(!s.resume || !s.out.empty(), "train::Loop: a resume needs the run folder (out) it continues");
  EMBER_CHECK(!s.resume || !s.write_checkpoint, "train::Loop: with a checkpoint format of its own (write_checkpoint) "
              "the program resumes the run itself and gives run() its state");
  steps_per_epoch_ = s.steps_per_epoch > 0 ? s.steps_per_epoch : s.steps;
  epochs_ = (s.steps + steps_per_epoch_ - 1) / steps_per_epoch_;
  if (s.out.empty()) return;
  EMBER_CHECK(s.folder == nullptr || s.folder->path() == s.out, "train::Loop: the folder given is {}, not out ({})",
              s.folder == nullptr ? "" : s.folder->path(), s.out);
  if (s.folder == nullptr) own_folder_ = std::make_unique<RunFolder>(s.out, s.world);
  folder_ = s.folder != nullptr ? s.folder : own_folder_.get();
  checkpoint_path_ = s.out + "/checkpoint.safetensors";
  // A new run never writes over a checkpoint it did not make (another run's, or another program's): the loop's
  // own format only; a program with its own format checks its folder itself.
  std::error_code error;
  EMBER_CHECK(!lead() || s.resume || s.write_checkpoint || !std::filesystem::exists(checkpoint_path_, error),
              "{} holds a checkpoint already: resume continues it; a new run needs another folder (or remove it)",
              s.out);
}

bool Loop::lead() const { return settings_.world == nullptr || settings_.world->rank() == 0; }

MetricsLog* Loop::metrics() { return folder_ != nullptr ? folder_->metrics() : nullptr; }

// The loop's own checkpoint, checked in full before anything is written.
RunState Loop::resume_from_checkpoint() {
  std::error_code error;
  EMBER_CHECK(std::filesystem::exists(checkpoint_path_, error), "resume: there is no {} to continue from (the run "
              "stopped before its first checkpoint, or this is another folder): start it without resume",
              checkpoint_path_);
  const RunState saved = load_checkpoint(checkpoint_path_, model_, optimizer_, settings_.settings);
  EMBER_CHECK(saved.total_steps == settings_.steps, "resume: {} is of a run of {} steps, these settings make {}",
              checkpoint_path_, saved.total_steps, settings_.steps);
  if (settings_.generator != nullptr) settings_.generator->set_state(settings_.generator->seed(), saved.generator_offset);
  return saved;
}

LoopResult Loop::run(const DataFn& data, const LossFn& loss_of) {
  HostStep step(model_, optimizer_, settings_.device, [&](const StepAt& at) { return HostStepData{data(at)}; },
                loss_of, {.clip = settings_.clip});
  return run(step);
}

LoopResult Loop::run(Step& step, const RunState& start) {
  const auto run_start = Clock::now();
  state_ = settings_.resume ? resume_from_checkpoint() : start;
  state_.total_steps = settings_.steps;
  if (folder_ != nullptr) folder_->open_metrics(settings_.resume || state_.step > 0, state_.step);
  if (const std::optional<Device> device = step.loss_log_device())
    loss_log_ = zeros({std::min(settings_.log_every, steps_per_epoch_)}, Dtype::Float32, *device);
  const bool at_stop = settings_.stop_after > 0 && state_.step >= settings_.stop_after;  // a resume at its stop
  while (state_.step < settings_.steps && !at_stop)
    if (!train_epoch(step, state_.step / steps_per_epoch_)) break;
  result_.steps = state_.step;
  result_.finished = state_.step == settings_.steps;
  // The evaluations asked for once: after the last step, by the process that trained it (a resume of a finished
  // run has them in its metrics already).
  if (result_.finished && result_.stopped_by_signal == 0 && !result_.step_losses.empty())
    result_.final_evaluations = evaluate(/*every_epoch=*/false);
  result_.seconds = seconds_since(run_start);
  return result_;
}

// One epoch's steps (from where a resume left it); false when the run stops in it (checkpointed).
bool Loop::train_epoch(Step& step, int64_t epoch) {
  const int64_t first = state_.step % steps_per_epoch_;
  const int64_t in_epoch = std::min(steps_per_epoch_, settings_.steps - epoch * steps_per_epoch_);
  Progress progress(settings_.quiet || !lead() ? Progress::Mode::Silent : Progress::detect(), settings_.log_every);
  progress.start_epoch(epoch + 1, epochs_, in_epoch);
  model_.train();
  reset_peak_memory();
  if (settings_.device.is_cuda()) reset_peak_memory(settings_.device);
  int64_t real_tokens = 0, padded_tokens = 0;
  bool stop = false;
  const auto epoch_start = Clock::now();
  for (int64_t index = first; index < in_epoch; ++index) {
    if (const int signal = folder_ != nullptr ? step.stop_signal() : 0) {  // on several ranks, the same step on each
      result_.stopped_by_signal = signal;
      stop = true;
      break;
    }
    if (index == first) step.stage({state_.step, epoch, index});  // an epoch's first batch: just before its step
    if (settings_.schedule) optimizer_.set_lr(settings_.schedule->lr_at(state_.step));
    const StepResult done = step.run(loss_log_.defined() ? next_loss_slot() : Tensor());  // forward, backward, update
    // The lookahead: on one GPU, batch index + 1 goes up while this step runs.
    if (index + 1 < in_epoch) step.stage({state_.step + 1, epoch, index + 1});
    ++state_.step;
    pending_.push_back(
        {state_.step, epoch + 1, optimizer_.lr(), done.loss, done.whole_batch_loss, done.logged, done.counted});
    real_tokens += done.real_tokens;
    padded_tokens += done.padded_tokens;
    // An epoch's last step is checkpointed after its evaluation (end_epoch), not here.
    const bool epoch_done = index + 1 == in_epoch;
    const bool save_now = settings_.save_every > 0 && state_.step % settings_.save_every == 0 && !epoch_done;
    const bool stop_now = settings_.stop_after > 0 && state_.step >= settings_.stop_after;
    // With a loss log (one GPU) the losses are read on logging steps and before a save; otherwise every step.
    if (!loss_log_.defined() || (index + 1) % settings_.log_every == 0 || epoch_done || save_now || stop_now) {
      read_losses();
      const double elapsed = seconds_since(epoch_start);
      const double tokens_per_second = real_tokens > 0 ? double(real_tokens) / elapsed : 0;
      progress.update(index + 1, state_.epoch_loss_sum / double(index + 1), tokens_per_second, elapsed);
    }
    if (save_now) save();
    if (stop_now) {
      stop = true;
      break;
    }
  }
  const double seconds = seconds_since(epoch_start);
  progress.finish_epoch();
  if (state_.step != epoch * steps_per_epoch_ + in_epoch) {  // stopped part-way: a checkpoint to resume from
    save();
    return false;
  }
  end_epoch(epoch, seconds, real_tokens, padded_tokens);
  return !stop;
}

// The loss log's slot for the next step's loss (read_losses empties it: a full log is read first).
Tensor Loop::next_loss_slot() {
  if (int64_t(pending_.size()) == loss_log_.numel()) read_losses();
  return loss_log_.narrow(0, int64_t(pending_.size()), 1);
}

// The pending steps' losses: checked (finite), summed into the epoch's, logged.
void Loop::read_losses() {
  std::vector<float> logged;  // with a loss log: every pending loss, in one copy
  if (loss_log_.defined() && !pending_.empty())
    logged = loss_log_.narrow(0, 0, int64_t(pending_.size())).to(Device::cpu()).to_vector<float>();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const PendingLoss& p = pending_[i];
    const double loss = p.value ? *p.value : !logged.empty() ? double(logged[i]) : p.loss.item<double>();  // (exact for float32)
    // Several ranks read the same whole-batch loss: they fail together, rank 0 reports it.
    on_every_rank_alike(settings_.world, [&] {
      EMBER_CHECK(std::isfinite(loss), "training diverged: the loss at step {} (epoch {}) is {}; that step is not saved "
                  "and the last checkpoint is kept (lower the learning rate, or clip the gradients' norm)", p.step, p.epoch, loss);
    });
    result_.step_losses.push_back(loss);
    state_.epoch_loss_sum += loss;
    for (const auto& [name, count] : p.counted) state_.epoch_sums[name] += count;
    if (MetricsLog* log = metrics()) {
      nlohmann::ordered_json record = {{"kind", "step"}, {"step", p.step}, {"epoch", p.epoch}, {"loss", loss}};
      for (const auto& [name, value] : p.logged.items()) record[name] = value;
      record["lr"] = p.lr;
      log->write(record);
    }
  }
  pending_.clear();
}

std::map<std::string, double> Loop::evaluate(bool every_epoch) {
  std::map<std::string, double> values;
  bool any = false;
  for (const Evaluation& e : settings_.evaluations) any |= e.every_epoch == every_epoch;
  if (!any) return values;
  const bool training = model_.is_training();
  model_.eval();
  {
    NoGradGuard no_grad;
    for (const Evaluation& e : settings_.evaluations)
      if (e.every_epoch == every_epoch) values[e.name] = e.evaluate();
  }
  model_.train(training);
  if (!settings_.quiet && lead() && !every_epoch)
    for (const Evaluation& e : settings_.evaluations)
      if (!e.every_epoch)
        fmt::print(stderr, "{}: {}\n", e.name, e.percent ? fmt::format("{:.2f}%", 100 * values[e.name])
                                                        : fmt::format("{:.4f}", values[e.name]));
  if (MetricsLog* log = metrics(); log != nullptr && !every_epoch) {
    nlohmann::ordered_json record = {{"kind", "final"}, {"step", state_.step}};
    for (const auto& [name, value] : values) record[name] = value;
    log->write(record);
    log->flush();
  }
  return values;
}

// The epoch's evaluations, its line and record (the loop's, or the program's record_epoch), the program's
// after_epoch, then the checkpoint.
void Loop::end_epoch(int64_t epoch, double seconds, int64_t real_tokens, int64_t padded_tokens) {
  const auto eval_start = Clock::now();
  EpochResult er;
  er.epoch = epoch + 1;
  er.step = state_.step;
  er.train_loss = state_.epoch_loss_sum / double(std::min(steps_per_epoch_, settings_.steps - epoch * steps_per_epoch_));
  er.sums = state_.epoch_sums;
  er.evaluations = evaluate(/*every_epoch=*/true);
  er.seconds = seconds;
  er.eval_seconds = seconds_since(eval_start);
  er.real_tokens_per_s = double(real_tokens) / seconds;
  er.padded_tokens_per_s = double(padded_tokens) / seconds;
  er.peak_bytes = memory_stats().peak_allocated;
  er.peak_rss_bytes = peak_rss_bytes();
  if (settings_.device.is_cuda()) {
    const MemoryStats gpu = memory_stats(settings_.device);
    er.gpu_allocated_bytes = gpu.allocated;
    er.gpu_peak_bytes = gpu.peak_allocated;
    er.gpu_reserved_bytes = gpu.reserved;
  }
  result_.epochs.push_back(er);
  if (settings_.record_epoch) {
    settings_.record_epoch(er);
  } else {
    if (!settings_.quiet && lead()) {
      std::string line = fmt::format("epoch {}/{}: train loss {:.4f}", er.epoch, epochs_, er.train_loss);
      for (const Evaluation& e : settings_.evaluations)
        if (e.every_epoch)
          line += e.percent ? fmt::format(" | {} {:.2f}%", e.name, 100 * er.evaluations[e.name])
                            : fmt::format(" | {} {:.4f}", e.name, er.evaluations[e.name]);
      fmt::print(stderr, "{} | {:.1f}s\n", line, seconds);
    }
    if (MetricsLog* log = metrics()) {
      nlohmann::ordered_json record = {{"kind", "epoch"}, {"epoch", er.epoch}, {"step", er.step},
                                       {"train_loss", er.train_loss}, {"train_seconds", er.seconds}};
      for (const auto& [name, value] : er.evaluations) record[name] = value;
      log->write(record);
    }
  }
  if (settings_.after_epoch) settings_.after_epoch(epoch + 1);
  state_.epoch_loss_sum = 0;
  state_.epoch_sums.clear();
  save();
}

// The checkpoint (with a run folder): every step it covers is in metrics.jsonl first, so that a resume keeps
// exactly those. The program's format (write_checkpoint) on every rank; the loop's on rank 0.
void Loop::save() {
  if (folder_ == nullptr) return;
  read_losses();
  if (MetricsLog* log = metrics()) log->flush();
  state_.generator_offset = settings_.generator != nullptr ? settings_.generator->offset() : 0;
  if (settings_.write_checkpoint) {
    settings_.write_checkpoint(state_);
    return;
  }
  const auto write = [&] { save_checkpoint(checkpoint_path_, model_, optimizer_, state_, settings_.settings); };
  if (settings_.world != nullptr) distributed::on_root(*settings_.world, write);
  else write();
}

}  // namespace ember::train
