// The IMDb trainer's training step on one GPU as CUDA graphs (--cuda-graph on; docs/cuda.md, "CUDA
// graphs"): one graph per batch shape, captured after that shape's first (eager) step, then
// replayed as one launch per step, with the step's inputs uploaded before the replay.
//
//   GraphStep graphs(model, optimizer, gen, device, clip);
//   for (...) {
//     Batch batch = pad_for_graphs(batcher.batch(order, b), max_len);  // T a multiple of 32
//     optimizer.set_lr(schedule.lr_at(step));
//     Tensor loss = graphs.run(batch);  // on the GPU; read it when logging
//   }
//
// What a replay cannot recompute on the host is uploaded before it, into fixed GPU tensors the
// graph reads (pinned staging, no wait): the tokens with the embedding backward's buckets, the
// positions, the padding mask and the labels (stage_ids, autograd/ops.h); AdamW's learning rate and
// bias corrections (Adam::stage_step); dropout's seed and first offset (Generator::set_device_state).
// The host side of the captured step runs once, at the capture (for the shape's first step, run
// eagerly just before: Optimizer::RetakeLastStep and Generator::Redraw make it that step's again);
// after each replay the optimiser counts the step (count_replayed_step) and the generator's numbers
// for it are taken.
#pragma once
#include <cstdint>
#include <map>
#include <utility>

#include "autograd/ops.h"
#include "core/cuda_graph.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/prefetch.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"

namespace ember::imdb {

// Graphs are captured per padded length: `batch` padded with [PAD] to the next multiple of 32
// tokens (at most max_len, and never shorter than it was), so a run of T 256 has at most 8 shapes.
constexpr int64_t kGraphPadMultiple = 32;
Batch pad_for_graphs(const Batch& batch, int64_t max_len);

// One training step on inputs already on the GPU: zero_grad, forward, cross-entropy, then what every
// step does with its loss (backward_and_update, train_step.h: backward, clipping of the gradients'
// norm to `clip` if > 0, the optimiser's step). What the trainer runs op by op on one GPU
// (--cuda-graph off), and what GraphStep captures. Returns the loss, on the GPU.
Tensor gpu_step(nn::TransformerClassifier& model, optim::Optimizer& optimizer, const DeviceBatch& inputs, double clip);

// How a graph-replaying runner (GraphStep here, GraphEvaluator in eval_graph.h) ran its calls: per padded
// batch shape, the first runs op by op and is captured, the next are one graph launch each.
struct GraphRunCounts {
  int64_t eager = 0;     // calls run op by op (a shape's first, or one whose capture failed)
  int64_t captures = 0;  // graphs captured
  int64_t replays = 0;   // calls run as one graph launch
};

class GraphStep {
 public:
  // `model` and `optimizer` (its parameters the model's) on `device`, a GPU; clip > 0: the
  // gradients' norm is clipped to it (clip_grad_norm_). Model, optimizer and gen must outlive this.
  GraphStep(nn::TransformerClassifier& model, optim::Adam& optimizer, Generator& gen, Device device, double clip,
            bool quiet = false);

  // One training step on `batch` at the optimizer's lr(): the first of its shape runs eagerly and
  // is then captured; later ones replay that graph. Returns the step's loss, a GPU scalar of its own.
  // The batch is uploaded on the compute stream, before the step (stage, prefetch.h). (The trainer
  // uploads its batches ahead, on the copy stream, and runs the overload below.)
  Tensor run(const Batch& batch);
  // The same on a batch already on the GPU (BatchPrefetcher::take, uploaded during the step
  // before): copied on the GPU into the graph's inputs (a device-to-device copy each, no kernel).
  // With `loss_into` (a float32 GPU tensor of one element: a slot of the trainer's loss log) the
  // loss is copied there and that is returned, rather than a tensor of its own.
  Tensor run(const DeviceBatch& batch, const Tensor& loss_into = Tensor());

  using Counts = GraphRunCounts;
  const Counts& counts() const { return counts_; }

 private:
  struct PerShape {
    DeviceBatch inputs;   // the tensors the graph reads, rewritten before each replay
    CudaGraph graph;
    Tensor loss;          // the captured step's loss: each replay rewrites it
    uint64_t draws = 0;   // dropout numbers one step takes
    bool eager_only = false;  // its capture failed: it keeps running eagerly
    int cache_misses = 0;     // captures that found no cached block (retried once, after another warm-up)
  };
  void copy_in(PerShape& shape, const DeviceBatch& batch);
  Tensor run_staged(PerShape& shape, int64_t B, int64_t T, const Tensor& loss_into);

  nn::TransformerClassifier& model_;
  optim::Adam& optimizer_;
  Generator& gen_;
  Device device_;
  double clip_;
  bool quiet_;
  Tensor dropout_state_;  // int64 [2] on the GPU: the seed and the step's first offset
  std::map<std::pair<int64_t, int64_t>, PerShape> shapes_;  // by (B, T)
  Counts counts_;
};

}  // namespace ember::imdb
