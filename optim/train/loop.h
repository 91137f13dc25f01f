// The training loop every trainer shares: a model's training is its data (the batch of each step) and its
// loss (a scalar on the batch); the loop does the rest. Read it top to bottom in loop.cpp, Loop::train_epoch:
//
//   for (each epoch, each step) {
//     optimizer.set_lr(schedule.lr_at(step));
//     Batch batch = data(at);                       // named host arrays, moved to the step's device
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
// (docs/training.md walks through a new model's training.) run(step) takes another kind of step (step.h): the
// layer's for several ranks (host_step.h) or one GPU (device_step.h: each batch uploaded during the step before,
// the step op by op or replayed as a CUDA graph), or a program's own; with several ranks (settings.world) rank 0
// alone prints and writes.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/distributed/process_group.h"
#include "core/random.h"
#include "core/tensor.h"
#include "nn/checkpoint.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/batch.h"
#include "optim/train/checkpoint.h"
#include "optim/train/host_step.h"
#include "optim/train/run_folder.h"
#include "optim/train/step.h"

namespace ember::train {

// The data gives each step's batch (named host arrays, batch.h); the loss reads them on the step's device.
using DataFn = std::function<Batch(const StepAt&)>;  // (LossFn: host_step.h)

struct EpochResult {
  int64_t epoch = 0;      // from 1
  int64_t step = 0;       // the run's step count at its end
  double train_loss = 0;  // the mean of the epoch's step losses (resumed or not)
  std::map<std::string, double> sums;  // the epoch's sums of its steps' counts (StepResult::counted)
  double seconds = 0;     // training wall time of the epoch (this process's part)
  double eval_seconds = 0;
  std::map<std::string, double> evaluations;
  double real_tokens_per_s = 0, padded_tokens_per_s = 0;  // the steps' StepResult tokens over `seconds`
  int64_t peak_bytes = 0;           // peak tensor memory during the epoch (allocator)
  int64_t peak_rss_bytes = 0;       // peak resident memory of the process
  int64_t gpu_allocated_bytes = 0;  // on a GPU device: its tensor memory at the epoch's end,
  int64_t gpu_peak_bytes = 0;       // its peak during the epoch (training and evaluation)
  int64_t gpu_reserved_bytes = 0;   // and what the caching allocator holds
};

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
  RunFolder* folder = nullptr;  // out's folder, made by the program (to check things under its lock first); none: made here
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
  // Several ranks (mpirun): rank 0 alone prints and writes the folder's files; a loss that is not finite is an
  // agreed error (every rank raises it). None: one process.
  distributed::ProcessGroup* world = nullptr;
  // A program with a checkpoint format of its own: resume = false here and the program restores its file itself,
  // then gives run() the state it holds; each save calls this on every rank (after the losses are read and logged,
  // metrics.jsonl flushed), and the program writes the file (on rank 0). None: the loop's (checkpoint.h).
  std::function<void(const RunState&)> write_checkpoint{};
  // A program that prints and records its epochs itself (more than the loop's line holds): called at each epoch's
  // end in place of the loop's epoch line and "epoch" record (before after_epoch); metrics() is its log.
  std::function<void(const EpochResult&)> record_epoch{};
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
  // The run: every step of the data's batches, through the plain step (forward, backward, clip, update).
  LoopResult run(const DataFn& data, const LossFn& loss_of);
  // The same through a program's own kind of step, from `start` (a run the program resumed from its own
  // checkpoint format; the loop's own resume, settings.resume, ignores it).
  LoopResult run(Step& step, const RunState& start = {});

  // The metrics log, once run() has opened it (rank 0 of a run with a folder); nullptr otherwise.
  MetricsLog* metrics();
  bool lead() const;  // rank 0, or the one process: prints and writes
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t epochs() const { return epochs_; }

 private:
  struct PendingLoss {  // a step's loss not read yet (on a GPU, reading it makes the host wait)
    int64_t step, epoch;
    double lr;
    Tensor loss;
    std::optional<double> value;  // read already (several ranks: the whole batch's)
    nlohmann::ordered_json logged;
    std::map<std::string, double> counted;
  };
  RunState resume_from_checkpoint();
  bool train_epoch(Step& step, int64_t epoch);
  void end_epoch(int64_t epoch, double seconds, int64_t real_tokens, int64_t padded_tokens);
  std::map<std::string, double> evaluate(bool every_epoch);
  Tensor next_loss_slot();
  void read_losses();
  void save();

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  LoopSettings settings_;
  int64_t steps_per_epoch_ = 0, epochs_ = 0;
  std::unique_ptr<RunFolder> own_folder_;  // made here for `out`, when the program gave none
  RunFolder* folder_ = nullptr;            // the run folder (out set), or none
  std::string checkpoint_path_;            // out/checkpoint.safetensors
  RunState state_;
  std::vector<PendingLoss> pending_;
  Tensor loss_log_;  // on a GPU step: the pending steps' losses, read in one copy (read_losses)
  LoopResult result_;
};

}  // namespace ember::train
