// The IMDb trainer's training step (training_run.cpp), of the one kind the run's settings choose,
// once (make_train_step):
//   - on one GPU, op by op (--cuda-graph off): each batch uploaded on the copy stream while the step
//     before runs (BatchPrefetcher, prefetch.h), then gpu_step (graph_step.h) on it;
//   - on one GPU as CUDA graphs (--cuda-graph on): the same uploads, the step replayed as its batch
//     shape's graph (GraphStep, graph_step.h), and the evaluation's graphs kept for the run;
//   - op by op from the host (the CPU, several ranks, ZeRO-1): the batch as host tensors (to_tensors,
//     trainer.h), the ranks' gradients exchanged (nn::DataParallel; ZeRO-1 in its optimiser).
// Each is a train::Step: the training layer's loop (optim/train/loop.cpp, Loop::train_epoch) drives all three:
//
//   step.stage(at_0);                                // an epoch's first batch: just before its step
//   for (b = 0; ...) {
//     optimizer.set_lr(schedule.lr_at(step));
//     train::StepResult r = step.run(loss_slot);     // one optimiser step on the staged batch
//     step.stage(at_b_plus_1);                       // the lookahead: on one GPU, up while step b runs
//     ... log r ...
//   }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "core/device.h"
#include "core/distributed/process_group.h"
#include "core/random.h"
#include "core/tensor.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/settings.h"
#include "nn/data_parallel.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/train/step.h"

namespace ember::imdb {

class GraphEvaluator;

// What every step does once its loss is computed: the gradients zeroed, the loss's backward (times
// `loss_scale` when given: a rank's share of the whole batch's mean), the ranks' gradients averaged
// (with `ranks`), their norm clipped to `clip` (when > 0; the norm stays on the GPU), the optimiser's
// step. (A step on the GPU zeroes the gradients before its forward too, so that the forward reuses
// their memory: gpu_step.)
struct UpdateOptions {
  std::optional<double> loss_scale;
  nn::DataParallel* ranks = nullptr;
  double clip = 0;
};
void backward_and_update(const Tensor& loss, nn::Module& model, optim::Optimizer& optimizer,
                         const UpdateOptions& options);

// Batch b of an epoch as a step takes it: this process's rows of the global batch (every row on one
// process), padded as the whole batch is.
struct StepBatch {
  Batch rows;
  int64_t batch_rows = 0;  // the whole batch's rows
  int64_t first_row = 0;   // where this process's rows start in it
};

// The kinds of step (train::Step, optim/train/step.h): the loop stages step `at`'s batch, which `batches` gives
// (this process's rows of the global batch), and runs the step.
using StepBatches = std::function<StepBatch(const train::StepAt&)>;

class TrainStep : public train::Step {
 public:
  explicit TrainStep(StepBatches batches) : batches_(std::move(batches)) {}
  void stage(const train::StepAt& at) final { stage_batch(batches_(at)); }
  // --cuda-graph on, one GPU: the evaluation's graphs (eval_graph.h), and the steps replayed so far.
  virtual GraphEvaluator* evaluator() { return nullptr; }
  virtual int64_t graph_replays() const { return 0; }

 protected:
  // Starts staging the batch of the next run(): on one GPU, its upload on the copy stream (while the
  // step queued before it runs); the host kind keeps it for run().
  virtual void stage_batch(StepBatch batch) = 0;

 private:
  StepBatches batches_;
};

// The step of these settings on `device`; every reference must outlive it. `ranks` is the run's
// DataParallel over `world` (used by the host kind only).
std::unique_ptr<TrainStep> make_train_step(const TrainConfig& config, nn::TransformerClassifier& model,
                                           optim::Optimizer& optimizer, Generator& gen, Device device,
                                           distributed::ProcessGroup& world, nn::DataParallel& ranks,
                                           StepBatches batches);

}  // namespace ember::imdb
