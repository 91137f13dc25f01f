// The trainer's step as CUDA graphs, one per batch shape (examples/imdb/graph_step.h).
#include "examples/imdb/graph_step.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/device_copy.h"
#include "core/gpu_stream.h"
#include "examples/imdb/train_step.h"

namespace ember::imdb {

Batch pad_for_graphs(const Batch& batch, int64_t max_len) {
  const int64_t T = batch.seq_len, B = batch.batch;
  const int64_t rounded = (T + kGraphPadMultiple - 1) / kGraphPadMultiple * kGraphPadMultiple;
  const int64_t padded = std::max(T, std::min(rounded, max_len));
  if (padded == T) return batch;
  Batch out = batch;
  out.seq_len = padded;
  out.tokens.assign(size_t(B * padded), 0);    // [PAD]
  out.key_mask.assign(size_t(B * padded), 0);  // padding
  for (int64_t r = 0; r < B; ++r) {
    std::copy_n(batch.tokens.begin() + r * T, T, out.tokens.begin() + r * padded);
    std::copy_n(batch.key_mask.begin() + r * T, T, out.key_mask.begin() + r * padded);
  }
  return out;
}

GraphStep::GraphStep(nn::TransformerClassifier& model, optim::Adam& optimizer, Generator& gen, Device device,
                     double clip, bool quiet)
    : model_(model), optimizer_(optimizer), gen_(gen), device_(device), clip_(clip), quiet_(quiet) {
  EMBER_CHECK(device.is_cuda(), "GraphStep: CUDA graphs need a GPU, not {}", device.str());
  optimizer_.keep_numbers_on_device(device);
  optimizer_.create_state();  // now, not in the first step (its warm-up must leave the cache as the capture needs it)
  dropout_state_ = zeros({2}, Dtype::Int64, device);
}

Tensor gpu_step(nn::TransformerClassifier& model, optim::Optimizer& optimizer, const DeviceBatch& inputs, double clip) {
  optimizer.zero_grad();  // before the forward: its activations may take the gradients' memory
  Tensor logits = model.forward(inputs.tokens, inputs.positions, inputs.mask, inputs.bigrams_if_any());
  Tensor loss = cross_entropy(logits, inputs.labels);
  UpdateOptions update;
  update.clip = clip;
  backward_and_update(loss, model, optimizer, update);
  return loss;
}

void GraphStep::copy_in(PerShape& s, const DeviceBatch& batch) {
  const int64_t B = batch.batch, T = batch.seq_len;
  DeviceBatch& in = s.inputs;
  if (!in.tokens.ids.defined()) {  // this shape's first batch: the graph's own tensors
    in.batch = B;
    in.seq_len = T;
    in.tokens = {Tensor::empty({B, T}, Dtype::Int64, device_), Tensor::empty({3 * B * T + 2}, Dtype::Int64, device_),
                 batch.tokens.bound};
    in.labels = {Tensor::empty({B}, Dtype::Int64, device_), Tensor(), batch.labels.bound};
    in.mask = Tensor::empty({B, T}, Dtype::Bool, device_);
    if (batch.bigrams.ids.defined())
      in.bigrams = {Tensor::empty({B, T}, Dtype::Int64, device_), Tensor::empty({3 * B * T + 2}, Dtype::Int64, device_),
                    batch.bigrams.bound};
    stage_ids(arange(T).view({1, T}), model_.config.max_len, /*with_buckets=*/true, device_, in.positions);
  }
  auto copy = [&](const Tensor& dst, const Tensor& src) {
    EMBER_CHECK(src.defined() && src.is_contiguous() && src.numel() == dst.numel() && src.dtype() == dst.dtype() &&
                    src.device() == device_,
                "GraphStep::run: the batch's input {} {} on {} does not fit the graph's {} {}", dtype_name(src.dtype()),
                shape_str(src.shape()), src.device().str(), dtype_name(dst.dtype()), shape_str(dst.shape()));
    const int64_t bytes = dst.numel() * int64_t(dtype_size(dst.dtype()));
    copy_bytes_across_devices(dst.raw_data(), device_, src.raw_data(), device_, bytes);  // on the GPU, no kernel
  };
  copy(in.tokens.ids, batch.tokens.ids);
  copy(in.tokens.buckets, batch.tokens.buckets);
  copy(in.mask, batch.mask);
  copy(in.labels.ids, batch.labels.ids);
  if (in.bigrams.ids.defined()) {
    copy(in.bigrams.ids, batch.bigrams.ids);
    copy(in.bigrams.buckets, batch.bigrams.buckets);
  }
}

Tensor GraphStep::run(const Batch& batch) {
  PerShape& s = shapes_[{batch.batch, batch.seq_len}];
  stage(batch, model_.config, device_, GpuStream::Compute, s.inputs);
  return run_staged(s, batch.batch, batch.seq_len, Tensor());
}

Tensor GraphStep::run(const DeviceBatch& batch, const Tensor& loss_into) {
  PerShape& s = shapes_[{batch.batch, batch.seq_len}];
  copy_in(s, batch);
  return run_staged(s, batch.batch, batch.seq_len, loss_into);
}

Tensor GraphStep::run_staged(PerShape& s, int64_t B, int64_t T, const Tensor& loss_into) {
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

  if (s.graph.captured()) {
    s.graph.replay();
    // What the captured step's host side did at the capture, done for this step: one more
    // optimiser step, and dropout's numbers for it taken.
    optimizer_.count_replayed_step();
    gen_.take(s.draws);
    ++counts_.replays;
    if (!loss_into.defined()) return s.loss.detach().clone();  // NOTE: the next replay rewrites s.loss
    Tensor slot = loss_into;
    slot.copy_(s.loss.detach().view(loss_into.shape()));  // on the GPU
    return slot;
  }

  auto step_body = [&] { s.loss = gpu_step(model_, optimizer_, s.inputs, clip_); };
  if (s.eager_only) step_body();
  else s.graph.warm_up(device_, step_body);  // eager: this shape's first step, and the capture's warm-up
  ++counts_.eager;
  s.draws = gen_.offset() - offset;
  Tensor loss = s.loss.detach();
  if (s.eager_only) return loss;
  try {
    // The capture records the step just run without running it. Its host side runs again for that
    // same step: the optimiser counts it again and dropout draws its numbers again (each object puts
    // its count back when the scope ends).
    const optim::Optimizer::RetakeLastStep same_step(optimizer_);
    const Generator::Redraw same_numbers(gen_, offset);
    s.graph.capture(device_, step_body);
    ++counts_.captures;
  } catch (const std::exception& e) {
    // NOTE: a step that cannot be captured (an op that uploads or waits inside it) still trains.
    // A block the allocator's cache lacked (lent since the warm-up) gets one more warm-up.
    const bool cache_miss = std::string(e.what()).find("no cached block") != std::string::npos;
    s.eager_only = !cache_miss || ++s.cache_misses > 1;
    if (s.eager_only && !quiet_)
      fmt::print(stderr, "warning: the training step of shape [{}, {}] could not be captured as a CUDA graph, it runs "
                 "op by op: {}\n", B, T, e.what());
  }
  return loss;
}

}  // namespace ember::imdb
