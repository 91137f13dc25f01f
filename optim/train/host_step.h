// The step kind of a run whose batches go from host arrays straight into the ops: the CPU, a GPU op by op, and
// several ranks (mpirun), each training its rows of the global batch with the ranks' gradients averaged
// (nn::DataParallel; ZeRO-1 in its optimiser). Loop::run(data, loss) runs it with one process.
//
//   optimizer.zero_grad();
//   Tensor loss = loss_of(on_device(data(at)));   // forward: the model's code
//   (loss * share).backward();                    // share: this rank's rows over the whole batch's mean
//   ranks->synchronize_gradients();               // several ranks: the gradients averaged
//   clip_grad_norm_(parameters, clip);            // (clip > 0)
//   optimizer.step();
//
// The batch of a step is made when the step runs (the data may draw from the run's generator). Its arrays go to
// the step's device, but for the ids arrays the Layout names (batch.h), which stay on the host: the embedding and
// cross-entropy check them there and upload them without waiting for the GPU. With several ranks the step also
// sums, over the ranks, the whole batch's loss and tokens for the log, and any rank's stop signal (each stops at
// the same step).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "core/device.h"
#include "core/distributed/process_group.h"
#include "core/tensor.h"
#include "nn/data_parallel.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/train/batch.h"
#include "optim/train/step.h"

namespace ember::train {

// A step's batch: this process's rows of it as named host arrays, where they sit in the whole batch (several
// ranks), and its tokens for the throughput (0: not counted).
struct HostStepData {
  Batch arrays;
  int64_t rows = 0;          // this process's rows
  int64_t batch_rows = 0;    // the whole batch's (the same on one process)
  int64_t first_row = 0;     // where this process's rows start in it
  int64_t real_tokens = 0;   // this process's real (not padding) tokens: summed over the ranks
  int64_t padded_tokens = 0;  // the whole batch's tokens, padding included
};
using HostDataFn = std::function<HostStepData(const StepAt&)>;
using LossFn = std::function<Tensor(const Batch&)>;

struct HostStepSettings {
  Layout layout{};  // the ids arrays: kept on the host for the ops to check and upload
  double clip = 0;  // > 0: the gradients' global norm clipped to it before each update
  // Several ranks: the run's process group, the gradients' exchange over it, and the run's generator (all or
  // none). Dropout then draws by global example (core/random.h, BatchSlice): the ranks together compute one
  // process's step.
  distributed::ProcessGroup* world = nullptr;
  nn::DataParallel* ranks = nullptr;
  Generator* generator = nullptr;
};

class HostStep final : public Step {
 public:
  // model and optimizer must outlive it; `device` is the model's.
  HostStep(nn::Module& model, optim::Optimizer& optimizer, Device device, HostDataFn data, LossFn loss_of,
           HostStepSettings settings = {});
  void stage(const StepAt& at) override { staged_ = at; }
  StepResult run(const Tensor& loss_slot) override;
  // NOTE: on several ranks each stops at the same step (a signal reaches the ranks at different moments; one
  // that stopped alone would leave the others waiting in an all-reduce).
  int stop_signal() const override;

 private:
  bool several() const { return settings_.world != nullptr && settings_.world->size() > 1; }

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  Device device_;
  HostDataFn data_;
  LossFn loss_of_;
  HostStepSettings settings_;
  std::optional<StepAt> staged_;
  int agreed_signal_ = 0;
};

}  // namespace ember::train
