// The trainer's step, its three kinds behind TrainStep (examples/imdb/train_step.h).
#include "examples/imdb/train_step.h"

#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "examples/imdb/eval_graph.h"
#include "examples/imdb/graph_step.h"
#include "examples/imdb/prefetch.h"
#include "examples/imdb/run_folder.h"
#include "examples/imdb/trainer.h"
#include "optim/schedule.h"

namespace ember::imdb {

void backward_and_update(const Tensor& loss, nn::Module& model, optim::Optimizer& optimizer,
                         const UpdateOptions& options) {
  optimizer.zero_grad();
  if (options.loss_scale) (loss * *options.loss_scale).backward();
  else loss.backward();
  if (options.ranks != nullptr) options.ranks->synchronize_gradients();
  if (options.clip > 0) optim::clip_grad_norm_(model.parameters(), options.clip);  // the norm stays on the GPU
  optimizer.step();
}

namespace {

// The CPU, several ranks, ZeRO-1: op by op, the batch as host tensors (the ops check and upload it).
class HostStep final : public TrainStep {
 public:
  HostStep(StepBatches batches, const TrainConfig& config, nn::TransformerClassifier& model, optim::Optimizer& optimizer,
           Generator& gen, Device device, distributed::ProcessGroup& world, nn::DataParallel& ranks)
      : TrainStep(std::move(batches)), model_(model), optimizer_(optimizer), gen_(gen), device_(device), world_(world), ranks_(ranks),
        clip_(config.zero ? 0.0 : config.clip) {}  // ZeRO-1 clips by the global norm itself

  void stage_batch(StepBatch batch) override { staged_ = std::move(batch); }

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
    Tensor loss = cross_entropy(model_.forward(t.tokens, t.padding_mask), t.labels);
    // Each rank's mean weighs rows / batch_rows of the whole batch's; DataParallel averages (/ size).
    UpdateOptions update;
    update.ranks = &ranks_;
    update.clip = clip_;
    if (several) update.loss_scale = double(rows.batch) * world_.size() / double(batch.batch_rows);
    backward_and_update(loss, model_, optimizer_, update);
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

// One GPU: the batch uploaded on the copy stream (BatchPrefetcher) while the step before it runs.
// The two kinds share how a step takes its batch and leaves its loss.
struct PrefetchedBatches {
  BatchPrefetcher prefetcher;
  int64_t real_tokens = 0, padded_tokens = 0;  // the staged batch's

  PrefetchedBatches(Device device, const TrainConfig& config) : prefetcher(device, config.model, config.batch_size) {}
  void stage(const StepBatch& batch) {
    real_tokens = batch.rows.real_tokens;
    padded_tokens = batch.batch_rows * batch.rows.seq_len;
    prefetcher.prefetch(batch.rows);
  }
  // `step` runs on the staged batch's inputs and returns its loss (or the slot, holding it).
  template <typename StepOnInputs>
  train::StepResult run(const Tensor& loss_slot, StepOnInputs&& step) {
    const DeviceBatch& inputs = prefetcher.take();  // the step waits (on the GPU) for its upload
    Tensor loss = step(inputs), slot = loss_slot;
    if (loss.raw_data() != slot.raw_data()) slot.copy_(loss.detach().view({1}));  // (a step op by op: on the GPU)
    prefetcher.release();  // its buffers are free once the step queued on them is done
    return {slot, std::nullopt, real_tokens, padded_tokens};
  }
};

class GpuStep final : public TrainStep {
 public:
  GpuStep(StepBatches batches, const TrainConfig& config, nn::TransformerClassifier& model, optim::Optimizer& optimizer,
          Device device)
      : TrainStep(std::move(batches)), model_(model), optimizer_(optimizer), device_(device), clip_(config.clip),
        batches_(device, config) {}
  void stage_batch(StepBatch batch) override { batches_.stage(batch); }
  train::StepResult run(const Tensor& loss_slot) override {
    return batches_.run(loss_slot, [&](const DeviceBatch& inputs) { return gpu_step(model_, optimizer_, inputs, clip_); });
  }
  std::optional<Device> loss_log_device() const override { return device_; }

 private:
  nn::TransformerClassifier& model_;
  optim::Optimizer& optimizer_;
  Device device_;
  double clip_;
  PrefetchedBatches batches_;
};

class GraphedGpuStep final : public TrainStep {
 public:
  GraphedGpuStep(StepBatches batches, const TrainConfig& config, nn::TransformerClassifier& model,
                 optim::Adam& optimizer, Generator& gen, Device device)
      : TrainStep(std::move(batches)), device_(device), graphs_(model, optimizer, gen, device, config.clip, config.quiet),
        evaluator_(model, device), batches_(device, config) {}
  void stage_batch(StepBatch batch) override { batches_.stage(batch); }
  train::StepResult run(const Tensor& loss_slot) override {
    return batches_.run(loss_slot, [&](const DeviceBatch& inputs) { return graphs_.run(inputs, loss_slot); });
  }
  std::optional<Device> loss_log_device() const override { return device_; }
  GraphEvaluator* evaluator() override { return &evaluator_; }
  int64_t graph_replays() const override { return graphs_.counts().replays; }

 private:
  Device device_;
  // NOTE: in this order: the graphs' GPU state (the optimiser's too) is made before the prefetcher's buffers.
  GraphStep graphs_;
  GraphEvaluator evaluator_;
  PrefetchedBatches batches_;
};

}  // namespace

std::unique_ptr<TrainStep> make_train_step(const TrainConfig& config, nn::TransformerClassifier& model,
                                           optim::Optimizer& optimizer, Generator& gen, Device device,
                                           distributed::ProcessGroup& world, nn::DataParallel& ranks,
                                           StepBatches batches) {
  // Several ranks and ZeRO-1 stay op by op on the host's batches (the all-reduce is not captured,
  // and the batches are padded for graphs all the same: the same numbers).
  if (!device.is_cuda() || world.size() > 1 || config.zero)
    return std::make_unique<HostStep>(std::move(batches), config, model, optimizer, gen, device, world, ranks);
  if (!config.uses_cuda_graph()) return std::make_unique<GpuStep>(std::move(batches), config, model, optimizer, device);
  auto* adam = dynamic_cast<optim::Adam*>(&optimizer);
  EMBER_CHECK(adam != nullptr, "train step: CUDA graphs of the step need an Adam optimiser");
  return std::make_unique<GraphedGpuStep>(std::move(batches), config, model, *adam, gen, device);
}

}  // namespace ember::imdb
