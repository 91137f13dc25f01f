// An evaluation as CUDA graphs, one per batch shape (optim/train/graph_eval.h).
#include "optim/train/graph_eval.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/gpu_stream.h"

namespace ember::train {

GraphEvaluator::GraphEvaluator(Device device, Layout layout, CountFn count_of)
    : device_(device), layout_(std::move(layout)), count_of_(std::move(count_of)) {
  EMBER_CHECK(device.is_cuda(), "GraphEvaluator: CUDA graphs need a GPU, not {}", device.str());
  total_ = zeros({}, Dtype::Float64, device);
}

GraphEvaluator::~GraphEvaluator() = default;

void GraphEvaluator::add(const Batch& batch) {
  PerShape& s = shapes_[batch_shape(batch)];
  // NOTE: no buckets: they serve only the embedding's backward (on a 20,002-word vocabulary their counting sort
  // was most of the host's time per batch).
  stage(batch, layout_, device_, GpuStream::Compute, s.inputs, /*with_buckets=*/false);
  if (s.graph.graph.captured()) {
    s.graph.graph.replay();
    ++counts_.replays;
    return;
  }
  auto body = [&] {
    Tensor count = count_of_(s.inputs);
    EMBER_CHECK(count.defined() && count.numel() == 1, "GraphEvaluator: a batch's count must be a scalar");
    total_.add_(count.dtype() == Dtype::Float64 ? count : count.to(Dtype::Float64));
  };
  ++counts_.eager;
  if (s.graph.eager_only) return body();
  s.graph.graph.warm_up(device_, body);  // this batch, counted op by op: the capture's warm-up
  // Recorded, not run: the batch is counted once. A failure keeps the shape op by op, which counts the same.
  if (s.graph.capture(device_, body).empty()) ++counts_.captures;
}

double GraphEvaluator::take_total() {
  const double total = total_.item<double>();
  total_.fill_(0);
  return total;
}

}  // namespace ember::train
