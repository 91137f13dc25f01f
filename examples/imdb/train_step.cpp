// The trainer's step: the host kind here, one GPU's the training layer's (examples/imdb/train_step.h).
#include "examples/imdb/train_step.h"

#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "examples/imdb/gpu_batch.h"
#include "examples/imdb/trainer.h"
#include "optim/schedule.h"
#include "optim/train/device_step.h"

namespace ember::imdb {

namespace {

// The CPU, several ranks, ZeRO-1: op by op, the batch as host tensors (the ops check and upload it).
class HostStep final : public train::Step {
 public:
  HostStep(StepBatches batches, const TrainConfig& config, nn::TransformerClassifier& model, optim::Optimizer& optimizer,
           Generator& gen, Device device, distributed::ProcessGroup& world, nn::DataParallel& ranks)
      : batches_(std::move(batches)), model_(model), optimizer_(optimizer), gen_(gen), device_(device), world_(world), ranks_(ranks),
        clip_(config.zero ? 0.0 : config.clip) {}  // ZeRO-1 clips by the global norm itself

  void stage(const train::StepAt& at) override { staged_ = batches_(at); }

  train::StepResult run(const Tensor&) override {
    EMBER_CHECK(staged_.has_value(), "train step: no batch was staged");
    const StepBatch batch = std::move(*staged_);
    staged_.reset();
    const Batch& rows = batch.rows;
    const bool several = world_.size() > 1;
    // Dropout draws by global example (core/random.h, BatchSlice), so the ranks together compute one
    // process's step.
    if (several) gen_.set_batch_slice({batch.batch_rows, batch.first_row, rows.batch});
    BatchTensors t = to_tensors(rows, device_);
    optimizer_.zero_grad();
    Tensor loss = cross_entropy(model_.forward(t.tokens, t.padding_mask), t.labels);
    // Each rank's mean weighs rows / batch_rows of the whole batch's; DataParallel averages (/ size).
    if (several) (loss * (double(rows.batch) * world_.size() / double(batch.batch_rows))).backward();
    else loss.backward();
    ranks_.synchronize_gradients();
    if (clip_ > 0) optim::clip_grad_norm_(model_.parameters(), clip_);
    optimizer_.step();
    train::StepResult result{loss, std::nullopt, rows.real_tokens, batch.batch_rows * rows.seq_len};
    if (several) {  // the whole batch's loss and tokens, for the log; and any rank's signal
      Tensor sums = from_vector(std::vector<double>{double(loss.item<float>()) * double(rows.batch),
                                                    double(rows.real_tokens), double(train::StopSignals::received())});
      world_.all_reduce(sums, distributed::ReduceOp::Sum);
      std::vector<double> totals = sums.to_vector<double>();
      result.whole_batch_loss = totals[0] / double(batch.batch_rows);
      result.real_tokens = int64_t(totals[1]);
      if (totals[2] > 0) agreed_signal_ = train::StopSignals::received() != 0 ? train::StopSignals::received() : SIGTERM;
    }
    return result;
  }

  // NOTE: on several ranks each stops at the same step (a signal reaches the ranks at different
  // moments; one that stopped alone would leave the others waiting in an all-reduce).
  int stop_signal() const override { return world_.size() > 1 ? agreed_signal_ : train::StopSignals::received(); }

 private:
  StepBatches batches_;
  nn::TransformerClassifier& model_;
  optim::Optimizer& optimizer_;
  Generator& gen_;
  Device device_;
  distributed::ProcessGroup& world_;
  nn::DataParallel& ranks_;
  double clip_;
  std::optional<StepBatch> staged_;
  int agreed_signal_ = 0;
};

}  // namespace

bool steps_on_one_gpu(const TrainConfig& config, Device device, const distributed::ProcessGroup& world) {
  // Several ranks and ZeRO-1 stay op by op on the host's batches (the all-reduce is not captured, and the batches
  // are padded for graphs all the same: the same numbers).
  return device.is_cuda() && world.size() == 1 && !config.zero;
}

std::unique_ptr<train::Step> make_train_step(const TrainConfig& config, nn::TransformerClassifier& model,
                                             optim::Optimizer& optimizer, Generator& gen, Device device,
                                             distributed::ProcessGroup& world, nn::DataParallel& ranks,
                                             StepBatches batches) {
  if (!steps_on_one_gpu(config, device, world))
    return std::make_unique<HostStep>(std::move(batches), config, model, optimizer, gen, device, world, ranks);
  // One GPU: the training layer's step on the classifier's arrays and loss.
  const nn::ClassifierConfig& shape = config.model;
  auto data = [batches = std::move(batches), shape](const train::StepAt& at) {
    const StepBatch batch = batches(at);
    return train::DeviceStepData{named_arrays(batch.rows, shape), batch.rows.real_tokens,
                                 batch.batch_rows * batch.rows.seq_len};
  };
  auto loss = [&model](const train::DeviceBatch& batch) { return loss_on(model, batch); };
  return std::make_unique<train::DeviceStep>(
      model, optimizer, gen, device, std::move(data), std::move(loss),
      train::DeviceStepSettings{.layout = array_layout(shape), .capacity = array_capacity(shape, config.batch_size),
                                .clip = config.clip, .cuda_graphs = config.uses_cuda_graph(), .quiet = config.quiet});
}

}  // namespace ember::imdb
