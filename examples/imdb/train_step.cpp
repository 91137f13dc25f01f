// The trainer's step: the training layer's kinds on the classifier's arrays and loss (examples/imdb/train_step.h).
#include "examples/imdb/train_step.h"

#include <memory>
#include <utility>

#include "examples/imdb/classifier_arrays.h"
#include "optim/train/device_step.h"
#include "optim/train/host_step.h"

namespace ember::imdb {

bool steps_on_one_gpu(const TrainConfig& config, Device device, const distributed::ProcessGroup& world) {
  // Several ranks and ZeRO-1 stay op by op on the host's batches (the all-reduce is not captured, and the batches
  // are padded for graphs all the same: the same numbers).
  return device.is_cuda() && world.size() == 1 && !config.zero;
}

std::unique_ptr<train::Step> make_train_step(const TrainConfig& config, nn::TransformerClassifier& model,
                                             optim::Optimizer& optimizer, Generator& gen, Device device,
                                             distributed::ProcessGroup& world, nn::DataParallel& ranks,
                                             StepBatches batches) {
  const nn::ClassifierConfig& shape = config.model;
  if (!steps_on_one_gpu(config, device, world)) {
    // The CPU, several ranks, ZeRO-1: op by op, this rank's rows of the batch as host arrays (the ops check the
    // ids and upload them).
    auto data = [batches = std::move(batches)](const train::StepAt& at) {
      const StepBatch batch = batches(at);
      return train::HostStepData{host_arrays(batch.rows), batch.rows.batch, batch.batch_rows, batch.first_row,
                                 batch.rows.real_tokens, batch.batch_rows * batch.rows.seq_len};
    };
    auto loss = [&model](const train::Batch& batch) { return loss_on(model, batch); };
    return std::make_unique<train::HostStep>(
        model, optimizer, device, std::move(data), std::move(loss),
        train::HostStepSettings{.layout = array_layout(shape),
                                .clip = config.zero ? 0.0 : config.clip,  // ZeRO-1 clips by the global norm itself
                                .world = &world, .ranks = &ranks, .generator = &gen});
  }
  // One GPU: the training layer's step on the classifier's arrays and loss.
  auto data = [batches = std::move(batches), shape](const train::StepAt& at) {
    const StepBatch batch = batches(at);
    return train::DeviceStepData{gpu_arrays(batch.rows, shape), batch.rows.real_tokens,
                                 batch.batch_rows * batch.rows.seq_len};
  };
  auto loss = [&model](const train::DeviceBatch& batch) { return loss_on(model, batch); };
  return std::make_unique<train::DeviceStep>(
      model, optimizer, gen, device, std::move(data), std::move(loss),
      train::DeviceStepSettings{.layout = array_layout(shape), .capacity = array_capacity(shape, config.batch_size),
                                .clip = config.clip, .cuda_graphs = config.uses_cuda_graph(), .quiet = config.quiet});
}

}  // namespace ember::imdb
