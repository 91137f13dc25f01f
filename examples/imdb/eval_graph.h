// The trainer's evaluation on one GPU as CUDA graphs (--cuda-graph on; issue 35: evaluation
// replayed like the steps). Per padded batch shape, the forward pass, the argmax and the count of
// correct predictions, added on the GPU to one running count, are captured after that shape's
// first (eager) batch and then replayed as one launch per batch. The host stages each batch (its
// ids checked and uploaded through pinned staging, stage() in prefetch.h; no buckets, which only a backward
// needs) and waits only when the count is read, once per evaluation.
//
//   GraphEvaluator graphs(model, device);            // kept for the run: each shape is captured once
//   for (...) graphs.add(pad_for_graphs(batch, max_len));
//   int64_t correct = graphs.take_correct();         // the one wait
#pragma once
#include <cstdint>
#include <map>
#include <utility>

#include "core/cuda_graph.h"
#include "core/device.h"
#include "core/tensor.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/graph_step.h"
#include "examples/imdb/prefetch.h"
#include "nn/transformer.h"

namespace ember::imdb {

class GraphEvaluator {
 public:
  // `model` on `device` (a GPU); it must outlive this. Batches are counted in eval mode, without
  // gradients: the caller switches (evaluate(), trainer.h).
  GraphEvaluator(nn::TransformerClassifier& model, Device device);

  // Adds the batch's correct predictions to the count on the GPU; the host does not wait.
  void add(const Batch& batch);
  // The correct predictions added since the last take (one wait for the GPU); the count restarts at 0.
  int64_t take_correct();

  using Counts = GraphRunCounts;  // per batch evaluated
  const Counts& counts() const { return counts_; }

 private:
  struct PerShape {
    DeviceBatch inputs;  // the tensors the graph reads, rewritten before each replay
    CudaGraph graph;
    bool eager_only = false;  // its capture failed for good: it keeps running op by op
    int cache_misses = 0;     // captures that found no cached block (retried once, at its next batch)
  };
  void count(const DeviceBatch& inputs);  // the work a graph holds

  nn::TransformerClassifier& model_;
  Device device_;
  Tensor correct_;  // float64 scalar on the GPU: the running count
  std::map<std::pair<int64_t, int64_t>, PerShape> shapes_;  // by (B, T)
  Counts counts_;
};

}  // namespace ember::imdb
