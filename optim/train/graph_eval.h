// An evaluation on one GPU as CUDA graphs: per batch shape, what the evaluation counts for a batch (e.g. its right
// predictions: the forward, the argmax, the comparison), added on the GPU to one running total, is captured after
// that shape's first (eager) batch and then replayed as one launch per batch. The host stages each batch (its ids
// checked and uploaded through pinned staging, batch.h; no buckets, which only a backward needs) and waits only
// when the total is read, once per evaluation.
//
//   train::GraphEvaluator graphs(device, layout, [&](const train::DeviceBatch& b) {
//     return sum(eq(argmax(model.forward(b.ids_at("tokens"), ...), 1), b.at("labels")));
//   });                                         // kept for the run: each shape is captured once
//   for (...) graphs.add(batch);                // the host does not wait
//   double correct = graphs.take_total();       // the one wait
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "optim/train/batch.h"
#include "optim/train/graph_step.h"

namespace ember::train {

class GraphEvaluator {
 public:
  // What one batch adds to the total: a scalar on `device` (a GPU). Batches are counted as the caller set the
  // model: in eval mode, without gradients (NoGradGuard).
  using CountFn = std::function<Tensor(const DeviceBatch&)>;
  GraphEvaluator(Device device, Layout layout, CountFn count_of);
  ~GraphEvaluator();  // (out of line: the graphs' destructors are this layer's call, not its user's)

  // Adds the batch's count to the total on the GPU; the host does not wait.
  void add(const Batch& batch);
  // The total added since the last take (one wait for the GPU); the total restarts at 0.
  double take_total();

  using Counts = GraphRunCounts;  // per batch evaluated
  const Counts& counts() const { return counts_; }

 private:
  struct PerShape {
    DeviceBatch inputs;  // the tensors the graph reads, rewritten before each replay
    ShapeGraph graph;
  };

  Device device_;
  Layout layout_;
  CountFn count_of_;
  Tensor total_;  // float64 scalar on the GPU
  std::map<std::vector<int64_t>, PerShape> shapes_;
  Counts counts_;
};

}  // namespace ember::train
