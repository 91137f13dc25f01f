// The step kind of a run on one GPU (train::Step, step.h): each step's batch is uploaded while the step before it
// runs (Prefetcher, prefetch.h), then the step runs on it op by op (step_on_device) or, with cuda_graphs, replayed
// as its batch shape's CUDA graph (GraphStep, graph_step.h). Its losses stay on the GPU until the loop reads them,
// every log_every steps in one copy.
//
//   train::DeviceStep step(model, optimizer, gen, Device::cuda(0),
//       [&](const train::StepAt& at) { return train::DeviceStepData{batch_of(at)}; },     // named host arrays
//       [&](const train::DeviceBatch& b) { return cross_entropy(model.forward(b.ids_at("ids")), b.ids_at("targets")); },
//       {.layout = layout, .clip = 1.0, .cuda_graphs = true});
//   train::Loop(model, optimizer, settings).run(step);
//
// The data is called when a step is staged, ahead of the step before it: it must not draw from the run's generator
// (a batch that does belongs to the plain step of Loop::run(data, loss), which makes it when its step runs).
#pragma once
#include <cstdint>
#include <map>
#include <functional>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/train/batch.h"
#include "optim/train/graph_step.h"
#include "optim/train/prefetch.h"
#include "optim/train/step.h"

namespace ember::train {

// A step's batch as the data gives it: named host arrays, and its tokens for the throughput (0: not counted).
struct DeviceStepData {
  Batch arrays;
  int64_t real_tokens = 0, padded_tokens = 0;
};
using DeviceDataFn = std::function<DeviceStepData(const StepAt&)>;

struct DeviceStepSettings {
  Layout layout{};                            // the ids arrays (batch.h)
  std::map<std::string, int64_t> capacity{};  // the largest batch's elements per array (Prefetcher)
  double clip = 0;                            // > 0: the gradients' norm clipped to it
  bool cuda_graphs = false;                   // replay each batch shape's step as a CUDA graph (needs an Adam)
  bool quiet = false;                         // no warning when a shape cannot be captured
};

class DeviceStep final : public Step {
 public:
  // model, optimizer and gen must outlive it; `device` is a GPU, the model's.
  DeviceStep(nn::Module& model, optim::Optimizer& optimizer, Generator& gen, Device device, DeviceDataFn data,
             DeviceLossFn loss_of, DeviceStepSettings settings);
  void stage(const StepAt& at) override;
  StepResult run(const Tensor& loss_slot) override;
  std::optional<Device> loss_log_device() const override { return device_; }
  // With cuda_graphs: how its steps ran (eager, captured, replayed).
  GraphRunCounts graph_counts() const { return graphs_ ? graphs_->counts() : GraphRunCounts{}; }

 private:
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  Device device_;
  DeviceDataFn data_;
  DeviceLossFn loss_of_;
  double clip_;
  // NOTE: in this order: the graphs' GPU state (the optimiser's too) is made before the prefetcher's buffers.
  std::optional<GraphStep> graphs_;
  Prefetcher prefetcher_;
  int64_t real_tokens_ = 0, padded_tokens_ = 0;  // the staged batch's
};

}  // namespace ember::train
