// The training loop every trainer shares: a model's training is its data (the batch of each step) and its
// loss (a scalar on the batch); the loop does the rest. Read it top to bottom in loop.cpp, Loop::run:
//
//   for (each epoch, each step) {
//     optimizer.set_lr(schedule.lr_at(step));
//     Batch batch = to_device(data(at), device);   // named host arrays, staged on the step's device
//     optimizer.zero_grad();
//     Tensor loss = loss_of(batch);                 // forward: the model's code
//     loss.backward();                              // backward
//     clip_grad_norm_(parameters, clip);            // (clip > 0)
//     optimizer.step();                             // update
//     ... log the loss, the progress line; a checkpoint every save_every steps ...
//   }
//   ... at each epoch's end: the evaluations asked for, the metrics line, after_epoch, a checkpoint ...
//
// What it owns besides: the run folder (`out`: made, locked, metrics.jsonl, checkpoint.safetensors with
// an exact resume), SIGINT / SIGTERM (checkpointed at the next step boundary, then stopped), --stop-after,
// a loss that is not finite (an error naming the step; the last checkpoint kept), the progress line
// (progress.h), evaluations on the sets the run asks for, each when asked (every epoch, or once at the end).
//
//   train::Loop loop(model, optimizer, {.steps = 400, .schedule = schedule, .clip = 1.0, .out = "runs/x"});
//   train::LoopResult r = loop.run(
//       [&](const train::StepAt& at) { return train::Batch{{"ids", ids_of(at)}, {"targets", targets_of(at)}}; },
//       [&](const train::Batch& b) { return cross_entropy(model.forward(b.at("ids")), b.at("targets")); });
//
// (docs/training.md walks through a new model's training.) Not yet here: several ranks (nn::DataParallel,
// ZeRO-1) and one GPU's prefetched uploads and CUDA graphs: the IMDb classifier and pretraining still run their
// own step kinds (examples/imdb/train_step.h) for those.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "nn/checkpoint.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace ember::train {

// Where a step is in the run.
struct StepAt {
  int64_t step = 0;   // the run's step, from 0
  int64_t epoch = 0;  // from 0
  int64_t index = 0;  // the step within its epoch, from 0
};

// A batch: named arrays. The data gives host tensors; the loss reads them on the step's device.
using Batch = std::map<std::string, Tensor>;
using DataFn = std::function<Batch(const StepAt&)>;
using LossFn = std::function<Tensor(const Batch&)>;

// An evaluation the run asks for, run with the model in eval mode and no graph: a number to report
// (an accuracy, a loss), printed and logged under `name`.
struct Evaluation {
  std::string name;                  // e.g. "validation_accuracy"
  std::function<double()> evaluate;
  bool every_epoch = true;           // false: once, when the run has trained its last step
  bool percent = false;              // printed as a percentage (logged as is)
};

struct LoopSettings {
  int64_t steps = 0;            // the run's steps in all (>= 1)
  int64_t steps_per_epoch = 0;  // 0: one epoch of every step
  std::optional<optim::Schedule> schedule{};  // the rate before each step; none: the optimiser's stays
  double clip = 0;              // > 0: the gradients' global norm clipped to it before each update
  Device device = Device::cpu();  // where the steps run: each batch's arrays are copied there
  Generator* generator = nullptr;  // the run's random stream (dropout, the data's draws): checkpointed
  // The run folder: made if needed and locked; metrics.jsonl (a "step" line per step, an "epoch" line per
  // epoch); checkpoint.safetensors at each epoch's end, every save_every steps and at a stop. "" = none.
  std::string out{};
  nn::Metadata settings{};      // the run's settings, recorded in its checkpoints: a resume must give the same
  int64_t save_every = 0;
  bool resume = false;          // continue from out/checkpoint.safetensors, exactly as if never stopped
  int64_t stop_after = 0;       // > 0: stop (checkpointed) once this many steps are done
  int64_t log_every = 50;       // the progress line's period in steps (a terminal's bar moves every step)
  bool quiet = false;           // no progress and no epoch lines
  std::vector<Evaluation> evaluations{};
  // Called at each epoch's end, after the evaluations and before the checkpoint (a program writes its
  // model file there, so that a checkpoint always has its epoch's model beside it).
  std::function<void(int64_t epoch)> after_epoch{};
};

struct EpochResult {
  int64_t epoch = 0;     // from 1
  double train_loss = 0;  // the mean of the epoch's step losses (resumed or not)
  double seconds = 0;     // training wall time of the epoch (this process's part)
  std::map<std::string, double> evaluations;
};

struct LoopResult {
  std::vector<EpochResult> epochs;  // the epochs this process finished
  std::map<std::string, double> final_evaluations;  // the evaluations run at the end (every_epoch = false)
  std::vector<double> step_losses;  // this process's steps, in order
  int64_t steps = 0;                // the run's step count at the end (resumed steps included)
  bool finished = false;            // every step trained
  int stopped_by_signal = 0;        // SIGINT / SIGTERM: checkpointed, then stopped
  double seconds = 0;
};

class Loop {
 public:
  // model and optimizer (the optimiser's parameters the model's) must outlive the loop. Checks the settings
  // (an ember::Error naming the one that is wrong).
  Loop(nn::Module& model, optim::Optimizer& optimizer, LoopSettings settings);
  LoopResult run(const DataFn& data, const LossFn& loss_of);

 private:
  void start_run_folder();
  bool train_epoch(int64_t epoch, const DataFn& data, const LossFn& loss_of);
  Tensor step(const Batch& batch, const LossFn& loss_of);
  void end_epoch(int64_t epoch, double seconds);
  std::map<std::string, double> evaluate(bool every_epoch);
  void save();

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  LoopSettings settings_;
  int64_t steps_per_epoch_ = 0, epochs_ = 0;
  struct Folder;  // the run folder's lock, metrics log and stop signals (out set)
  std::shared_ptr<Folder> folder_;
  struct State {
    int64_t step = 0;
    double epoch_loss_sum = 0;
  } state_;
  LoopResult result_;
};

// The batch's arrays on `device` (the same tensors when they are there already).
Batch to_device(const Batch& batch, Device device);

}  // namespace ember::train
