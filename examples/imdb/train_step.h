// The IMDb trainer's training step (training_run.cpp), of the one kind the run's settings choose,
// once (make_train_step):
//   - on one GPU, op by op (--cuda-graph off): each batch uploaded on the copy stream while the step
//     before runs (BatchPrefetcher, prefetch.h), then gpu_step (graph_step.h) on it;
//   - on one GPU as CUDA graphs (--cuda-graph on): the same uploads, the step replayed as its batch
//     shape's graph (GraphStep, graph_step.h), and the evaluation's graphs kept for the run;
//   - op by op from the host (the CPU, several ranks, ZeRO-1): the batch as host tensors (to_tensors,
//     trainer.h), the ranks' gradients exchanged (nn::DataParallel; ZeRO-1 in its optimiser).
// The epoch loop is the same for all three:
//
//   step->stage(batch_0);                            // an epoch's first batch: just before its step
//   for (b = 0; ...) {
//     optimizer.set_lr(schedule.lr_at(step));
//     StepResult r = step->run(loss_slot);           // one optimiser step on the staged batch
//     step->stage(batch_b_plus_1);                   // the lookahead: on one GPU, up while step b runs
//     ... log r ...
//   }
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "core/device.h"
#include "core/distributed/process_group.h"
#include "core/random.h"
#include "core/tensor.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/settings.h"
#include "nn/data_parallel.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"

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

struct StepResult {
  Tensor loss;  // this process's loss; on one GPU, in the loss log's slot run() was given, not read yet
  std::optional<double> whole_batch_loss;  // several ranks: the whole batch's, already read
  int64_t real_tokens = 0, padded_tokens = 0;  // the whole batch's (every rank's)
};

class TrainStep {
 public:
  virtual ~TrainStep() = default;
  // Starts staging the batch of the next run(): on one GPU, its upload on the copy stream (while the
  // step queued before it runs); the host kind keeps it for run(). One batch is staged at a time.
  virtual void stage(StepBatch batch) = 0;
  // One optimiser step on the staged batch, at the optimiser's lr(). On one GPU the loss is left in
  // `loss_slot` (a float32 GPU tensor of one element: a slot of the trainer's loss log, read with
  // the others when logging); the host kind takes none (undefined).
  virtual StepResult run(const Tensor& loss_slot) = 0;
  // True on one GPU: run() needs a loss slot.
  virtual bool loss_on_gpu() const { return false; }
  // The signal that stops the run at this step boundary, or 0: this process's (train::StopSignals); on
  // several ranks, the one any rank had received at the last step, agreed on by them all.
  virtual int stop_signal() const;
  // --cuda-graph on, one GPU: the evaluation's graphs (eval_graph.h), and the steps replayed so far.
  virtual GraphEvaluator* evaluator() { return nullptr; }
  virtual int64_t graph_replays() const { return 0; }
};

// The step of these settings on `device`; every reference must outlive it. `ranks` is the run's
// DataParallel over `world` (used by the host kind only).
std::unique_ptr<TrainStep> make_train_step(const TrainConfig& config, nn::TransformerClassifier& model,
                                           optim::Optimizer& optimizer, Generator& gen, Device device,
                                           distributed::ProcessGroup& world, nn::DataParallel& ranks);

}  // namespace ember::imdb
