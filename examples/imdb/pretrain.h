// `imdb pretrain`: masked-token prediction (masking.h) over the training reviews, on the classifier's own
// encoder (masked_token_model.h), as a first stage before `imdb train --init RUN` (encoder_file.h).
// It reads every training review whole, in windows of --max-len tokens (review_windows), and never the
// test reviews nor the --validation ones. A run folder as `train` writes: vocab.txt, metrics.jsonl (each
// step's masked-token loss and accuracy), checkpoint.safetensors (exact resume: the masks are drawn from
// the seed and the step), encoder.safetensors (with every checkpoint: each epoch's end, --save-every, a stop) and report.html.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/process_group.h"
#include "examples/imdb/masking.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/trainer.h"
#include "nn/checkpoint.h"

namespace ember::imdb {

inline constexpr const char* kPretrainCheckpointFormat = "ember-imdb-pretrain-checkpoint-v1";

struct PretrainConfig {
  // The model, the data (--data, --limit, --validation, --vocab), the optimiser and the run folder's
  // settings, as for `train`. Its max_len is the windows' length; truncate and classes are not used.
  TrainConfig train;
  int64_t steps = 0;  // the run's steps (the schedule's length); 0: --epochs over the windows
  MaskingRates rates;

  std::map<std::string, std::string> to_metadata() const;  // train's, with pretrain_steps
};

struct PretrainResult {
  int64_t windows = 0;                  // windows of training text per epoch
  int64_t parameters = 0;
  int64_t steps = 0, total_steps = 0;   // done (resumed steps included), and of the whole run
  bool finished = false;
  bool already_finished = false;        // a --resume of a finished run: nothing trained, its encoder written again
  int stopped_by_signal = 0;
  double wall_seconds = 0;
  std::vector<double> step_losses, step_accuracies;  // this process's steps, in order (whole batches')
};

// The training reviews whole (not truncated), encoded with a vocabulary built from them; the test
// reviews are not kept. --validation reviews are held out as `train` holds them out (and not kept either).
Data prepare_pretraining_data(const TrainConfig& config);

// Collective under mpirun, as train(): each rank computes its rows of every global batch.
PretrainResult pretrain(const PretrainConfig& config, distributed::ProcessGroup& world);
PretrainResult pretrain(const PretrainConfig& config, const Data& data, distributed::ProcessGroup& world);

// report.html of a pretraining folder: the masked-token loss and accuracy per step and per epoch, the settings.
void write_pretrain_report(const std::string& folder, const std::map<std::string, std::string>& settings,
                           int64_t parameters);

// A pretraining's checkpoint.safetensors, read and checked as far as it can be without the data: its format, every
// number of its state, its settings against its tensors, the tensors loaded into the masked-token model and AdamW it
// describes (names, shapes, dtypes, every moment), no NaN or infinity, its checksum. An ember::Error naming the file.
struct PretrainCheckpoint {
  PretrainConfig config;  // its settings (config.train.model.vocab_size counts [MASK])
  int64_t step = 0, total_steps = 0;
  int64_t parameters = 0;
  nn::TensorMap tensors;  // model.* and optim.*
};
PretrainCheckpoint check_pretrain_checkpoint(const std::string& path);

// report.html of a pretraining folder written again from its metrics.jsonl and checkpoint (imdb report --run), or
// without a checkpoint from its encoder's settings (which do not record --steps or the masking rates); returns its
// path.
std::string rebuild_pretrain_report(const std::string& folder);

}  // namespace ember::imdb
