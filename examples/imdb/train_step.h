// The IMDb trainer's training step (training_run.cpp): the training layer's step of the one kind the run's settings
// choose, once (make_train_step), on the classifier's named arrays and loss (classifier_arrays.h):
//   - on one GPU, train::DeviceStep (optim/train/device_step.h): each batch uploaded on the copy stream while the
//     step before runs, the step op by op (--cuda-graph off) or replayed as its batch shape's CUDA graph (on);
//   - otherwise train::HostStep (optim/train/host_step.h): op by op from host arrays, on the CPU or on several
//     ranks (each its rows of the global batch, the gradients exchanged by nn::DataParallel; ZeRO-1 in its
//     optimiser).
// The training layer's loop (optim/train/loop.cpp, Loop::train_epoch) drives either:
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
#include <utility>

#include "core/device.h"
#include "core/distributed/process_group.h"
#include "core/random.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/settings.h"
#include "nn/data_parallel.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/train/step.h"

namespace ember::imdb {

// Batch b of an epoch as a step takes it: this process's rows of the global batch (every row on one
// process), padded as the whole batch is.
struct StepBatch {
  Batch rows;
  int64_t batch_rows = 0;  // the whole batch's rows
  int64_t first_row = 0;   // where this process's rows start in it
};

// The step `at`'s batch (this process's rows of the global batch).
using StepBatches = std::function<StepBatch(const train::StepAt&)>;

// The step of these settings on `device`; every reference must outlive it. `ranks` is the run's DataParallel over
// `world` (used by the host kind only).
std::unique_ptr<train::Step> make_train_step(const TrainConfig& config, nn::TransformerClassifier& model,
                                             optim::Optimizer& optimizer, Generator& gen, Device device,
                                             distributed::ProcessGroup& world, nn::DataParallel& ranks,
                                             StepBatches batches);
// Whether these settings train on one GPU, the training layer's step (train::DeviceStep): the kind that can
// replay CUDA graphs (and evaluate as graphs).
bool steps_on_one_gpu(const TrainConfig& config, Device device, const distributed::ProcessGroup& world);

}  // namespace ember::imdb
