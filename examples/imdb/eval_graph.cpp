// The trainer's evaluation as CUDA graphs, one per padded batch shape (examples/imdb/eval_graph.h).
#include "examples/imdb/eval_graph.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <string>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/gpu_stream.h"
#include "examples/imdb/prefetch.h"

namespace ember::imdb {

GraphEvaluator::GraphEvaluator(nn::TransformerClassifier& model, Device device) : model_(model), device_(device) {
  EMBER_CHECK(device.is_cuda(), "GraphEvaluator: CUDA graphs need a GPU, not {}", device.str());
  correct_ = zeros({}, Dtype::Float64, device);
}

void GraphEvaluator::count(const DeviceBatch& in) {
  Tensor predicted = argmax(model_.forward(in.tokens, in.positions, in.mask, in.bigrams_if_any()), 1);
  correct_.add_(sum(eq(predicted, in.labels.ids).to(Dtype::Float64)));
}

void GraphEvaluator::add(const Batch& batch) {
  PerShape& s = shapes_[{batch.batch, batch.seq_len}];
  // NOTE: no buckets: they serve only the embedding's backward (on a 20,002-word vocabulary their
  // counting sort was most of the host's time per batch).
  stage(batch, model_.config, device_, GpuStream::Compute, s.inputs, /*with_buckets=*/false);
  if (s.graph.captured()) {
    s.graph.replay();
    ++counts_.replays;
    return;
  }
  auto body = [&] { count(s.inputs); };
  ++counts_.eager;
  if (s.eager_only) return body();
  s.graph.warm_up(device_, body);  // this batch, counted op by op: the capture's warm-up
  try {
    s.graph.capture(device_, body);  // recorded, not run: the batch is counted once
    ++counts_.captures;
  } catch (const std::exception& e) {
    // NOTE: as in GraphStep: a block the allocator's cache lacked gets one more warm-up (the shape's
    // next batch); anything else keeps the shape op by op, which counts the same.
    const bool cache_miss = std::string(e.what()).find("no cached block") != std::string::npos;
    s.eager_only = !cache_miss || ++s.cache_misses > 1;
  }
}

int64_t GraphEvaluator::take_correct() {
  const double correct = correct_.item<double>();
  correct_.fill_(0);
  return std::llround(correct);
}

}  // namespace ember::imdb
