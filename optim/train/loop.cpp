// The training loop every trainer shares (loop.h): Loop::run is the whole of it, from top to bottom.
#include "optim/train/loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "optim/train/checkpoint.h"
#include "optim/train/progress.h"
#include "optim/train/run_folder.h"

namespace ember::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

struct Loop::Folder {
  explicit Folder(const std::string& out) : lock((check_output_folder(out), out)) {}
  RunLock lock;
  StopSignals signals;
  std::optional<MetricsLog> metrics;
  std::string checkpoint;  // out/checkpoint.safetensors
};

Batch to_device(const Batch& batch, Device device) {
  Batch on_device;
  for (const auto& [name, array] : batch) on_device.emplace(name, array.device() == device ? array : array.to(device));
  return on_device;
}

Loop::Loop(nn::Module& model, optim::Optimizer& optimizer, LoopSettings settings)
    : model_(model), optimizer_(optimizer), settings_(std::move(settings)) {
  const LoopSettings& s = settings_;
  EMBER_CHECK(s.steps >= 1 && s.steps <= optim::Optimizer::max_steps, "train::Loop: steps must be at least 1, not {}",
              s.steps);
  EMBER_CHECK(s.steps_per_epoch >= 0, "train::Loop: steps_per_epoch must be >= 0, not {}", s.steps_per_epoch);
  EMBER_CHECK(s.save_every >= 0 && s.stop_after >= 0 && s.log_every >= 1 && s.clip >= 0,
              "train::Loop: save_every and stop_after must be >= 0, log_every >= 1 and clip >= 0");
  EMBER_CHECK(!s.resume || !s.out.empty(), "train::Loop: a resume needs the run folder (out) it continues");
  steps_per_epoch_ = s.steps_per_epoch > 0 ? s.steps_per_epoch : s.steps;
  epochs_ = (s.steps + steps_per_epoch_ - 1) / steps_per_epoch_;
  if (!s.out.empty()) start_run_folder();
}

// The folder, locked; a resume's checkpoint loaded (checked in full before anything is written); the metrics
// log kept in step with it.
void Loop::start_run_folder() {
  folder_ = std::make_shared<Folder>(settings_.out);
  folder_->checkpoint = settings_.out + "/checkpoint.safetensors";
  if (settings_.resume) {
    std::error_code error;
    EMBER_CHECK(std::filesystem::exists(folder_->checkpoint, error), "resume: there is no {} to continue from (the run "
                "stopped before its first checkpoint, or this is another folder): start it without resume",
                folder_->checkpoint);
    const RunState saved = load_checkpoint(folder_->checkpoint, model_, optimizer_, settings_.settings);
    EMBER_CHECK(saved.total_steps == settings_.steps, "resume: {} is of a run of {} steps, these settings make {}",
                folder_->checkpoint, saved.total_steps, settings_.steps);
    state_.step = saved.step;
    state_.epoch_loss_sum = saved.epoch_loss_sum;
    if (settings_.generator != nullptr) settings_.generator->set_state(settings_.generator->seed(), saved.generator_offset);
  }
  folder_->metrics.emplace(settings_.out + "/metrics.jsonl", settings_.resume, state_.step);
}

LoopResult Loop::run(const DataFn& data, const LossFn& loss_of) {
  const auto start = Clock::now();
  const bool at_stop = settings_.stop_after > 0 && state_.step >= settings_.stop_after;  // a resume at its stop
  while (state_.step < settings_.steps && !at_stop)
    if (!train_epoch(state_.step / steps_per_epoch_, data, loss_of)) break;
  result_.steps = state_.step;
  result_.finished = state_.step == settings_.steps;
  if (result_.finished && result_.stopped_by_signal == 0) result_.final_evaluations = evaluate(/*every_epoch=*/false);
  result_.seconds = seconds_since(start);
  return result_;
}

// One epoch's steps (from where a resume left it); false when the run stops in it (checkpointed).
bool Loop::train_epoch(int64_t epoch, const DataFn& data, const LossFn& loss_of) {
  const int64_t first = state_.step % steps_per_epoch_;
  const int64_t in_epoch = std::min(steps_per_epoch_, settings_.steps - epoch * steps_per_epoch_);
  Progress progress(settings_.quiet ? Progress::Mode::Silent : Progress::detect(), settings_.log_every);
  progress.start_epoch(epoch + 1, epochs_, in_epoch);
  model_.train();
  const auto epoch_start = Clock::now();
  for (int64_t index = first; index < in_epoch; ++index) {
    if (folder_ && StopSignals::received() != 0) {
      result_.stopped_by_signal = StopSignals::received();
      break;
    }
    const StepAt at{state_.step, epoch, index};
    if (settings_.schedule) optimizer_.set_lr(settings_.schedule->lr_at(at.step));
    const double loss = step(to_device(data(at), settings_.device), loss_of).item<double>();  // (exact for float32)
    EMBER_CHECK(std::isfinite(loss), "training diverged: the loss at step {} (epoch {}) is {}; that step is not saved "
                "and the last checkpoint is kept (lower the learning rate, or clip)", at.step + 1, epoch + 1, loss);
    ++state_.step;
    state_.epoch_loss_sum += loss;
    result_.step_losses.push_back(loss);
    if (folder_)
      folder_->metrics->write({{"kind", "step"}, {"step", state_.step}, {"epoch", epoch + 1}, {"loss", loss},
                               {"lr", optimizer_.lr()}});
    progress.update(index + 1, state_.epoch_loss_sum / double(index + 1), 0, seconds_since(epoch_start));
    const bool epoch_done = index + 1 == in_epoch;
    if (settings_.stop_after > 0 && state_.step >= settings_.stop_after && !epoch_done) break;
    if (settings_.save_every > 0 && state_.step % settings_.save_every == 0 && !epoch_done) save();
  }
  progress.finish_epoch();
  if (state_.step != epoch * steps_per_epoch_ + in_epoch) {  // stopped part-way: a checkpoint to resume from
    save();
    return false;
  }
  end_epoch(epoch, seconds_since(epoch_start));
  return !(settings_.stop_after > 0 && state_.step >= settings_.stop_after);
}

// One optimiser step: forward (the model's loss), backward, the update.
Tensor Loop::step(const Batch& batch, const LossFn& loss_of) {
  optimizer_.zero_grad();
  Tensor loss = loss_of(batch);
  EMBER_CHECK(loss.defined() && loss.numel() == 1 && loss.requires_grad(), "train::Loop: the loss must be a scalar "
              "that requires grad (the model's output, reduced), not a tensor of shape {}",
              loss.defined() ? shape_str(loss.shape()) : std::string("(undefined)"));
  loss.backward();
  if (settings_.clip > 0) optim::clip_grad_norm_(model_.parameters(), settings_.clip);
  optimizer_.step();
  return loss.detach();
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
  if (!settings_.quiet && !every_epoch)
    for (const Evaluation& e : settings_.evaluations)
      if (!e.every_epoch)
        fmt::print(stderr, "{}: {}\n", e.name, e.percent ? fmt::format("{:.2f}%", 100 * values[e.name])
                                                        : fmt::format("{:.4f}", values[e.name]));
  if (folder_ && !every_epoch) {
    nlohmann::ordered_json record = {{"kind", "final"}, {"step", state_.step}};
    for (const auto& [name, value] : values) record[name] = value;
    folder_->metrics->write(record);
    folder_->metrics->flush();
  }
  return values;
}

// The epoch's evaluations, its line (console, metrics.jsonl), the program's after_epoch, then the checkpoint.
void Loop::end_epoch(int64_t epoch, double seconds) {
  EpochResult er;
  er.epoch = epoch + 1;
  er.train_loss = state_.epoch_loss_sum / double(std::min(steps_per_epoch_, settings_.steps - epoch * steps_per_epoch_));
  er.seconds = seconds;
  er.evaluations = evaluate(/*every_epoch=*/true);
  result_.epochs.push_back(er);
  if (!settings_.quiet) {
    std::string line = fmt::format("epoch {}/{}: train loss {:.4f}", er.epoch, epochs_, er.train_loss);
    for (const Evaluation& e : settings_.evaluations)
      if (e.every_epoch)
        line += e.percent ? fmt::format(" | {} {:.2f}%", e.name, 100 * er.evaluations[e.name])
                          : fmt::format(" | {} {:.4f}", e.name, er.evaluations[e.name]);
    fmt::print(stderr, "{} | {:.1f}s\n", line, seconds);
  }
  if (folder_) {
    nlohmann::ordered_json record = {{"kind", "epoch"}, {"epoch", er.epoch}, {"step", state_.step},
                                     {"train_loss", er.train_loss}, {"train_seconds", er.seconds}};
    for (const auto& [name, value] : er.evaluations) record[name] = value;
    folder_->metrics->write(record);
  }
  if (settings_.after_epoch) settings_.after_epoch(epoch + 1);
  state_.epoch_loss_sum = 0;
  save();
}

// The checkpoint (with a run folder): every step it covers is in metrics.jsonl first, so that a resume keeps exactly those.
void Loop::save() {
  if (!folder_) return;
  folder_->metrics->flush();
  const RunState state{state_.step, settings_.steps,
                       settings_.generator != nullptr ? settings_.generator->offset() : 0, state_.epoch_loss_sum};
  save_checkpoint(folder_->checkpoint, model_, optimizer_, state, settings_.settings);
}

}  // namespace ember::train
