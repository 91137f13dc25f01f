// A training step on one GPU, on a batch already there (prefetch.h): op by op (step_on_device), or as CUDA graphs
// (GraphStep; docs/cuda.md, "CUDA graphs"): one graph per batch shape, captured after that shape's first (eager)
// step, then replayed as one launch per step, with the step's inputs copied into the graph's own tensors first.
//
//   train::GraphStep graphs(model, optimizer, gen, device, loss_of, clip);
//   for (...) {
//     optimizer.set_lr(schedule.lr_at(step));
//     Tensor loss = graphs.run(prefetcher.take());  // on the GPU; read it when logging
//   }
//
// What a replay cannot recompute on the host is uploaded before it, into fixed GPU tensors the graph reads: the
// batch (its arrays, ids checked and bucketed on the host: batch.h), AdamW's learning rate and bias corrections
// (Adam::stage_step), dropout's seed and first offset (Generator::set_device_state). The host side of the captured
// step runs once, at the capture (for the shape's first step, run eagerly just before: Optimizer::RetakeLastStep
// and Generator::Redraw make it that step's again); after each replay the optimiser counts the step
// (count_replayed_step) and the generator's numbers for it are taken. A loss that cannot be captured (an op that
// reads a GPU value on the host, e.g. an embedding of ids not staged as DeviceIds) keeps running op by op.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/cuda_graph.h"
#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/train/batch.h"

namespace ember::train {

// A model's loss on a batch on the GPU (the forward: the model's code).
using DeviceLossFn = std::function<Tensor(const DeviceBatch&)>;

// One training step on inputs on the GPU: the gradients zeroed (before the forward, so that its activations may
// reuse their memory), the loss, its backward, the gradients' norm clipped to `clip` when > 0 (the norm stays on
// the GPU), the optimiser's step. Returns the loss, on the GPU.
Tensor step_on_device(nn::Module& model, optim::Optimizer& optimizer, const DeviceLossFn& loss_of,
                      const DeviceBatch& inputs, double clip);

// How a graph-replaying runner (GraphStep, GraphEvaluator) ran its calls: per batch shape, the first runs op by op
// and is captured, the next are one graph launch each.
struct GraphRunCounts {
  int64_t eager = 0;     // calls run op by op (a shape's first, or one whose capture failed)
  int64_t captures = 0;  // graphs captured
  int64_t replays = 0;   // calls run as one graph launch
};

// A batch's shape: every array's, in name order (one graph per shape); of host arrays or of a DeviceBatch's.
std::vector<int64_t> batch_shape(const Batch& arrays);
// Copies `batch` on the GPU into `graph_inputs`, made on the first call with the same shapes (a device-to-device
// copy per array, no kernel); an array the batch stages once per shape is copied only then.
void copy_into_graph_inputs(const DeviceBatch& batch, Device device, DeviceBatch& graph_inputs);
// One batch shape's graph, and whether it could be captured.
struct ShapeGraph {
  CudaGraph graph;
  bool eager_only = false;  // its capture failed for good: the shape keeps running op by op
  int cache_misses = 0;     // captures that found no cached block (retried once, after another warm-up)
  // Captures `body` (recorded, not run). On a failure, eager_only is set, but for the first block the allocator's
  // cache lacked (lent since the warm-up: one more warm-up, at the shape's next call). Returns the error, or "".
  std::string capture(Device device, const std::function<void()>& body);
};

class GraphStep {
 public:
  // `model` and `optimizer` (its parameters the model's) on `device`, a GPU; clip > 0: the gradients' norm is
  // clipped to it. Model, optimizer and gen must outlive this.
  GraphStep(nn::Module& model, optim::Adam& optimizer, Generator& gen, Device device, DeviceLossFn loss_of,
            double clip, bool quiet = false);
  ~GraphStep();  // (out of line: the graphs' destructors are this layer's call, not its user's)

  // One training step on `batch` (on the GPU: Prefetcher::take) at the optimizer's lr(): the first of its shape
  // runs eagerly and is then captured; later ones replay that graph. Returns the step's loss, a GPU scalar of its
  // own; with `loss_into` (a float32 GPU tensor of one element: a slot of the loop's loss log) the loss is copied
  // there and that is returned.
  Tensor run(const DeviceBatch& batch, const Tensor& loss_into = Tensor());

  using Counts = GraphRunCounts;
  const Counts& counts() const { return counts_; }

 private:
  struct PerShape {
    DeviceBatch inputs;  // the tensors the graph reads, rewritten before each replay
    ShapeGraph graph;
    Tensor loss;         // the captured step's loss: each replay rewrites it
    uint64_t draws = 0;  // dropout numbers one step takes
  };

  nn::Module& model_;
  optim::Adam& optimizer_;
  Generator& gen_;
  Device device_;
  DeviceLossFn loss_of_;
  double clip_;
  bool quiet_;
  Tensor dropout_state_;  // int64 [2] on the GPU: the seed and the step's first offset
  std::map<std::vector<int64_t>, PerShape> shapes_;
  Counts counts_;
};

}  // namespace ember::train
