// The step kind of a run on one GPU: prefetched batches, op by op or as CUDA graphs (optim/train/device_step.h).
#include "optim/train/device_step.h"

#include <optional>
#include <utility>

#include "core/error.h"

namespace ember::train {
namespace {

optim::Adam& adam_for_graphs(optim::Optimizer& optimizer) {
  auto* adam = dynamic_cast<optim::Adam*>(&optimizer);
  EMBER_CHECK(adam != nullptr, "train step: CUDA graphs of the step need an Adam optimiser (its numbers are staged "
              "on the GPU before each replay)");
  return *adam;
}

}  // namespace

DeviceStep::DeviceStep(nn::Module& model, optim::Optimizer& optimizer, Generator& gen, Device device, DeviceDataFn data,
                       DeviceLossFn loss_of, DeviceStepSettings settings)
    : model_(model), optimizer_(optimizer), device_(device), data_(std::move(data)), loss_of_(std::move(loss_of)),
      clip_(settings.clip),
      graphs_(settings.cuda_graphs ? std::make_optional<GraphStep>(model, adam_for_graphs(optimizer), gen, device,
                                                                   loss_of_, settings.clip, settings.quiet)
                                   : std::nullopt),
      prefetcher_(device, std::move(settings.layout), settings.capacity) {}

void DeviceStep::stage(const StepAt& at) {
  DeviceStepData batch = data_(at);
  real_tokens_ = batch.real_tokens;
  padded_tokens_ = batch.padded_tokens;
  prefetcher_.prefetch(batch.arrays);  // its upload runs on the copy stream, during the step queued before it
}

StepResult DeviceStep::run(const Tensor& loss_slot) {
  const DeviceBatch& inputs = prefetcher_.take();  // the step waits (on the GPU) for its upload
  Tensor loss = graphs_ ? graphs_->run(inputs, loss_slot) : step_on_device(model_, optimizer_, loss_of_, inputs, clip_);
  Tensor slot = loss_slot;
  if (loss.raw_data() != slot.raw_data()) slot.copy_(loss.detach().view({1}));  // (a step op by op: on the GPU)
  prefetcher_.release();  // its buffers are free once the step queued on them is done
  return {slot, std::nullopt, real_tokens_, padded_tokens_};
}

}  // namespace ember::train
