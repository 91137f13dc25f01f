// A training step on one GPU, op by op or as CUDA graphs, one per batch shape (optim/train/graph_step.h).
#include "optim/train/graph_step.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "autograd/ops.h"
#include "core/device_copy.h"
#include "core/error.h"
#include "optim/schedule.h"

namespace ember::train {

Tensor step_on_device(nn::Module& model, optim::Optimizer& optimizer, const DeviceLossFn& loss_of,
                      const DeviceBatch& inputs, double clip) {
  optimizer.zero_grad();  // before the forward: its activations may take the gradients' memory
  Tensor loss = loss_of(inputs);
  EMBER_CHECK(loss.defined() && loss.numel() == 1 && loss.requires_grad(), "train step: the loss must be a scalar "
              "that requires grad (the model's output, reduced), not a tensor of shape {}",
              loss.defined() ? shape_str(loss.shape()) : std::string("(undefined)"));
  loss.backward();
  if (clip > 0) optim::clip_grad_norm_(model.parameters(), clip);  // the norm stays on the GPU
  optimizer.step();
  return loss;
}

std::vector<int64_t> batch_shape(const Batch& arrays) {
  std::vector<int64_t> key;
  for (const auto& [name, array] : arrays) {
    key.push_back(array.dim());
    key.insert(key.end(), array.shape().begin(), array.shape().end());
  }
  return key;
}

void copy_into_graph_inputs(const DeviceBatch& batch, Device device, DeviceBatch& in) {
  auto copy = [&](const std::string& name, const Tensor& dst, const Tensor& src) {
    EMBER_CHECK(src.defined() && src.is_contiguous() && src.numel() == dst.numel() && src.dtype() == dst.dtype() &&
                    src.device() == device,
                "graph step: the batch's array '{}' {} {} on {} does not fit the graph's {} {}", name,
                dtype_name(src.dtype()), shape_str(src.shape()), src.device().str(), dtype_name(dst.dtype()),
                shape_str(dst.shape()));
    const int64_t bytes = dst.numel() * int64_t(dtype_size(dst.dtype()));
    copy_bytes_across_devices(dst.raw_data(), device, src.raw_data(), device, bytes);  // on the GPU, no kernel
  };
  const bool first = in.arrays.empty();  // this shape's first batch: the graph's own tensors
  for (const auto& [name, array] : batch.arrays) {
    if (!first && batch.same_per_shape.count(name) != 0) continue;  // the same in every batch of this shape
    if (first) in.arrays[name] = Tensor::empty(array.shape(), array.dtype(), device);
    EMBER_CHECK(in.arrays.count(name) != 0, "graph step: the batch has an array '{}' its shape's graph does not read",
                name);
    copy(name, in.arrays.at(name), array);
    const DeviceIds* ids = batch.find_ids(name);
    if (ids == nullptr) continue;
    DeviceIds& into = in.ids[name];
    if (first) {
      into = {in.arrays[name], ids->buckets.defined() ? Tensor::empty(ids->buckets.shape(), Dtype::Int64, device)
                                                      : Tensor(), ids->bound};
    }
    if (into.buckets.defined()) copy(name + " (its buckets)", into.buckets, ids->buckets);
  }
  if (first) in.same_per_shape = batch.same_per_shape;
}

std::string ShapeGraph::capture(Device device, const std::function<void()>& body) {
  try {
    graph.capture(device, body);
    return "";
  } catch (const std::exception& e) {
    // NOTE: a body that cannot be captured (an op that uploads or waits inside it) still runs, op by op.
    const bool cache_miss = std::string(e.what()).find("no cached block") != std::string::npos;
    eager_only = !cache_miss || ++cache_misses > 1;
    return e.what();
  }
}

GraphStep::GraphStep(nn::Module& model, optim::Adam& optimizer, Generator& gen, Device device, DeviceLossFn loss_of,
                     double clip, bool quiet)
    : model_(model), optimizer_(optimizer), gen_(gen), device_(device), loss_of_(std::move(loss_of)), clip_(clip),
      quiet_(quiet) {
  EMBER_CHECK(device.is_cuda(), "GraphStep: CUDA graphs need a GPU, not {}", device.str());
  optimizer_.keep_numbers_on_device(device);
  optimizer_.create_state();  // now, not in the first step (its warm-up must leave the cache as the capture needs it)
  dropout_state_ = zeros({2}, Dtype::Int64, device);
}

GraphStep::~GraphStep() = default;

Tensor GraphStep::run(const DeviceBatch& batch, const Tensor& loss_into) {
  PerShape& s = shapes_[batch_shape(batch.arrays)];
  copy_into_graph_inputs(batch, device_, s.inputs);
  // This step's numbers, uploaded before it runs (or replays).
  const uint64_t offset = gen_.offset();
  const int64_t state[2] = {int64_t(gen_.seed()), int64_t(offset)};
  upload_into(dropout_state_, state, sizeof state);
  optimizer_.stage_step();
  struct Unbind {  // the generator reads its numbers on the host again after the step
    Generator& gen;
    ~Unbind() { gen.set_device_state(nullptr, 0); }
  } unbind{gen_};
  gen_.set_device_state(reinterpret_cast<const uint64_t*>(dropout_state_.data<int64_t>()), offset);

  if (s.graph.graph.captured()) {
    s.graph.graph.replay();
    // What the captured step's host side did at the capture, done for this step: one more optimiser step, and
    // dropout's numbers for it taken.
    optimizer_.count_replayed_step();
    gen_.take(s.draws);
    ++counts_.replays;
    if (!loss_into.defined()) return s.loss.detach().clone();  // NOTE: the next replay rewrites s.loss
    Tensor slot = loss_into;
    slot.copy_(s.loss.detach().view(loss_into.shape()));  // on the GPU
    return slot;
  }

  auto step_body = [&] { s.loss = step_on_device(model_, optimizer_, loss_of_, s.inputs, clip_); };
  if (s.graph.eager_only) step_body();
  else s.graph.graph.warm_up(device_, step_body);  // eager: this shape's first step, and the capture's warm-up
  ++counts_.eager;
  s.draws = gen_.offset() - offset;
  Tensor loss = s.loss.detach();
  if (s.graph.eager_only) return loss;
  // The capture records the step just run without running it. Its host side runs again for that same step: the
  // optimiser counts it again and dropout draws its numbers again (each object puts its count back when the scope
  // ends).
  std::string error;
  {
    const optim::Optimizer::RetakeLastStep same_step(optimizer_);
    const Generator::Redraw same_numbers(gen_, offset);
    error = s.graph.capture(device_, step_body);
  }
  if (error.empty()) ++counts_.captures;
  else if (s.graph.eager_only && !quiet_)
    fmt::print(stderr, "warning: the training step of shape {} could not be captured as a CUDA graph, it runs op by "
               "op: {}\n", shape_str(batch.arrays.begin()->second.shape()), error);
  return loss;
}

}  // namespace ember::train
