// A training run's checkpoint, for an exact resume: the model's and the optimiser's tensors, where the
// run is (step, the generator's offset, the epoch's loss so far) and the run's settings, with a checksum
// over all of it. Written atomically (a kill leaves the previous file), read back checked in full before
// anything is loaded: a file of other settings, a damaged one or one of another program is refused by name.
//
//   RunState state{.step = 120, .total_steps = 400, .generator_offset = gen.offset(), .epoch_loss_sum = s};
//   save_checkpoint(out + "/checkpoint.safetensors", model, optimizer, state, settings);
//   RunState back = load_checkpoint(path, model, optimizer, settings);   // the same settings, or an error
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "nn/checkpoint.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace ember::train {

// Where a run is between two steps: what a checkpoint holds besides the tensors.
struct RunState {
  int64_t step = 0;               // steps done
  int64_t total_steps = 0;        // of the whole run
  uint64_t generator_offset = 0;  // the run's random stream (dropout, sampling), when it has one
  double epoch_loss_sum = 0;      // the current epoch's step losses so far: its mean loss stays exact over a resume
  std::map<std::string, double> epoch_sums{};  // the epoch's sums of its steps' counts so far (StepResult::counted)
};

// The format written (its "format" metadata entry).
inline constexpr const char* kCheckpointFormat = "ember-train-checkpoint-v1";

// Writes model.* and optim.* tensors, the state and `settings` (the run's settings, as text: a resume
// must give the same) into `path`, atomically, after checking that every tensor is finite (a run that
// diverged is an ember::Error naming the tensor, and the file before stays).
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const RunState& state, const nn::Metadata& settings);

// Reads `path`, checks its format, its settings against `settings` (each key the same), its numbers, its
// checksum and that the optimiser's step count is the state's, then loads it into `model` and `optimizer`.
// An ember::Error naming the file and the problem otherwise (model and optimizer may be half-loaded then:
// discard them).
RunState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                         const nn::Metadata& settings);

// A checksum of the tensors (names, dtypes, shapes, bytes) and the metadata but its own entry
// ("checksum"): 64-bit FNV-1a, to find a file changed or damaged after it was written (not an
// adversary). Hex, 16 digits.
std::string checkpoint_checksum(const nn::TensorMap& tensors, const nn::Metadata& metadata);

}  // namespace ember::train
