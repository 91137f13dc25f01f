// One kind of optimiser step, chosen once per run (train::Loop drives it, loop.h). The loop stages the batch of
// each step before the step runs (one GPU: its upload may run during the step before) and reads the loss when it
// logs. The layer's kinds: HostStep (host_step.h: from host arrays, one process or several ranks; run(data, loss)
// uses it) and DeviceStep (device_step.h: one GPU, prefetched uploads, CUDA graphs); a program may bring its own
// (examples/imdb/pretrain.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/tensor.h"
#include "optim/train/run_folder.h"

namespace ember::train {

// Where a step is in the run.
struct StepAt {
  int64_t step = 0;   // the run's step, from 0
  int64_t epoch = 0;  // from 0
  int64_t index = 0;  // the step within its epoch, from 0
};

// What one step reports.
struct StepResult {
  Tensor loss;  // this process's loss; on a GPU in the loss slot run() was given, not read yet
  std::optional<double> whole_batch_loss;      // read already (several ranks: the whole batch's loss)
  int64_t real_tokens = 0, padded_tokens = 0;  // the whole batch's tokens, for the throughput (0: not counted)
  // More of the step, read already: fields of its "step" line in metrics.jsonl after the loss (e.g. a
  // masked-token accuracy), in order; and counts the loop sums over the epoch (RunState::epoch_sums, kept exact
  // over a resume: e.g. the epoch's right predictions and their number).
  nlohmann::ordered_json logged = nlohmann::ordered_json::object();
  std::map<std::string, double> counted{};
};

class Step {
 public:
  virtual ~Step() = default;
  // The batch of the step at `at`, staged for the next run(). One batch is staged at a time. The loop stages
  // step n + 1 before it reads step n's loss and may checkpoint step n: staging must not draw from the run's
  // generator (a batch that does is made in run(), as the plain step's is).
  virtual void stage(const StepAt& at) = 0;
  // One optimiser step on the staged batch, at the optimiser's lr(). With a loss log (loss_log_device) the
  // loss is left in `loss_slot`, a float32 tensor of one element there, read by the loop with the others.
  virtual StepResult run(const Tensor& loss_slot) = 0;
  // A device (a GPU) where the losses stay until the loop logs them, every log_every steps in one copy; none:
  // each step's loss is read at once.
  virtual std::optional<Device> loss_log_device() const { return std::nullopt; }
  // The signal that stops the run at this step boundary, or 0 (several ranks: agreed by every rank).
  virtual int stop_signal() const { return StopSignals::received(); }
};

}  // namespace ember::train
