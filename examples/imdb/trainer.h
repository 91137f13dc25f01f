// The IMDb trainer: a run's settings (settings.cpp), the data (trainer.cpp), training with per-epoch
// evaluation (training_run.cpp), checkpoints that resume exactly (checkpoints.cpp), evaluation and
// prediction from a saved run (trainer.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/distributed/process_group.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/vocabulary.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/train/graph_eval.h"
#include "optim/train/loop.h"
#include "optim/train/run_folder.h"

namespace ember::imdb {

struct EpochResult {
  int64_t epoch = 0;
  double train_loss = 0;
  double test_accuracy = 0;    // on every test review
  double validation_accuracy = NAN;  // on the held-out training reviews (--validation); NaN without
  double seconds = 0;          // training wall time of the epoch
  double eval_seconds = 0;
  double real_tokens_per_s = 0;
  double padded_tokens_per_s = 0;
  int64_t peak_bytes = 0;      // peak tensor memory (allocator)
  int64_t peak_rss_bytes = 0;  // peak resident memory of the process
  int64_t gpu_allocated_bytes = 0;  // on --device cuda: GPU tensor memory at the epoch's end
  int64_t gpu_peak_bytes = 0;       // and its peak during the epoch (training and evaluation)
  int64_t gpu_reserved_bytes = 0;   // held by the caching allocator
};

struct RunResult {
  std::vector<EpochResult> epochs;  // the epochs this process trained
  int64_t parameters = 0;
  int64_t steps = 0;                // the run's step count at the end (resumed steps included)
  int64_t total_steps = 0;
  bool finished = false;            // every step trained (not stopped by --stop-after or a signal)
  int stopped_by_signal = 0;        // SIGINT or SIGTERM: checkpointed at a step boundary, then stopped
  double final_test_accuracy = 0;   // of the last epoch (when finished)
  double wall_seconds = 0;
  std::vector<double> step_losses;  // every step's loss, in order (this process's steps)
  int64_t graph_replays = 0;        // --cuda-graph on: steps replayed as CUDA graphs (graph_step.h)
  // --validation: of this process's epochs, the one with the best validation accuracy (the first on
  // ties); 0 without a validation set. Its test accuracy is the one to report when choosing by it.
  int64_t best_validation_epoch = 0;
};

struct Data {
  Vocabulary vocabulary;
  std::vector<std::vector<int32_t>> train_tokens, test_tokens, validation_tokens;
  std::vector<int> train_labels, test_labels, validation_labels;
  std::vector<int64_t> test_lengths;  // each test review's whole length: its tokens before truncation
  // Which training reviews --validation held out, whatever their order, encoding or truncation: the SHA-256 of
  // their set (each review's own SHA-256 of its label and text, sorted); empty without --validation. A pretraining
  // records it and `train --init` compares it (encoder_file.h).
  std::string validation_fingerprint;
};
// Loads (downloading if needed), applies --limit, holds out --validation training reviews (the last N
// of a shuffle with a fixed seed, so the same ones for every run; the rest keep their order), builds the
// vocabulary from the remaining training reviews (or uses the one given, e.g. a saved run's) and encodes.
Data prepare_data(const TrainConfig& config, const Vocabulary* vocabulary = nullptr);
// SHA-256 of the vocabulary and the encoded reviews and labels: a resume checks that it trains
// on the same data (another data set with a vocabulary of the same size is refused).
std::string data_fingerprint(const Data& data);

// Trains with per-epoch test accuracy, writing metrics.jsonl, checkpoint.safetensors,
// model.safetensors and vocab.txt into config.out. One trainer at a time per folder (a lock,
// config.out/.lock). A --resume is checked in full (settings, data, every tensor) before any file
// is written. SIGINT and SIGTERM stop it at the next step boundary, checkpointed. A loss that is
// not finite stops it with an error naming the step (the last checkpoint is kept).
// With a world of several ranks (mpirun), each rank trains on its slice of every global batch
// (--batch-size stays global) and rank 0 alone prints and writes files; collective: every rank
// calls it with the same settings (checked), and a signal to any rank stops every rank at the same step.
RunResult train_classifier(const TrainConfig& config);
RunResult train_classifier(const TrainConfig& config, const Data& data);
RunResult train_classifier(const TrainConfig& config, distributed::ProcessGroup& world);
RunResult train_classifier(const TrainConfig& config, const Data& data, distributed::ProcessGroup& world);

// AdamW's parameter groups of the recipe: weight matrices decay, biases, LayerNorm parameters
// and embeddings do not. With encoder_lr_scale != 1 (--encoder-lr-scale), everything but the
// classification head and the bigram embeddings (new in a fine-tune) learns at that fraction of the rate.
std::vector<optim::ParamGroup> parameter_groups(const nn::Module& model, double weight_decay,
                                                double encoder_lr_scale = 1.0);

// What a checkpoint holds, once checked: check_checkpoint() reads the file, rebuilds the model
// and optimiser it describes and loads every tensor into them, as --resume does. Throws
// ember::Error naming the file for anything a resume would stumble on.
struct CheckpointInfo {
  int64_t step = 0;                // steps done
  int64_t total_steps = 0;         // of the whole run (step <= total_steps)
  uint64_t generator_offset = 0;   // dropout's random stream
  double epoch_loss_sum = 0;       // the current epoch's losses so far (its train loss, exactly)
  std::string data_fingerprint;    // data_fingerprint() of the run's data
  TrainConfig config;
};
CheckpointInfo check_checkpoint(const std::string& path);
// SHA-256 of a saved file's metadata (but its own entry, kContentKey) and tensors (names, dtypes,
// shapes, bytes). Checkpoints and model files record it; loading checks it after every other
// check, so that a change no other check can see (heads, dropout, a weight's bits) is refused too.
inline constexpr const char* kContentKey = "content_sha256";
std::string content_fingerprint(const std::map<std::string, Tensor>& tensors,
                                const std::map<std::string, std::string>& metadata);
void check_content_fingerprint(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata, const std::string& what);
// Writes the checkpoint (atomically) after checking that every tensor is finite (a run that
// diverged is an error, and the previous checkpoint stays). `optimizer_state` is the optimiser's
// state_dict() (collective under ZeRO-1: every rank gathers it, rank 0 writes).
void save_checkpoint(const std::string& path, const TrainConfig& config, const CheckpointInfo& info,
                     const nn::TransformerClassifier& model, const std::map<std::string, Tensor>& optimizer_state);
// Reads and checks a checkpoint, checks that it was written with the `expected` settings, and
// loads it into `model` and `optimizer` (built from them). On error, discard both.
CheckpointInfo restore_checkpoint(const std::string& path, const TrainConfig& expected,
                                  nn::TransformerClassifier& model, optim::Optimizer& optimizer);
// The same on every rank of `world`: rank 0 reads the file and sends it; collective.
CheckpointInfo restore_checkpoint(const std::string& path, const TrainConfig& expected,
                                  nn::TransformerClassifier& model, optim::Optimizer& optimizer,
                                  distributed::ProcessGroup& world);

// Accuracy of `model` on encoded reviews (switched to eval mode and back, no grad). With a world,
// its ranks share the batches (the same batches as one process, so the same predictions) and the
// counts are summed: collective, every rank gets the accuracy. On a GPU the count stays there until
// the end (one wait per evaluation); with `graphs` (one process, the model's GPU; counting right_predictions,
// classifier_arrays.h) each batch, padded to a multiple of 32 tokens, is one replay of its shape's graph
// (optim/train/graph_eval.h).
double evaluate(nn::TransformerClassifier& model, const std::vector<std::vector<int32_t>>& reviews,
                const std::vector<int>& labels, int64_t batch_size = 64, distributed::ProcessGroup* world = nullptr,
                train::GraphEvaluator* graphs = nullptr);

// The accuracy of each review's P(positive) against its label: positive when the probability is above one half
// (a tie is negative, as the first index of an argmax). 0 for no reviews; an ember::Error for counts that differ.
double accuracy_of(const std::vector<double>& positive_probabilities, const std::vector<int>& labels);

// The accuracy on the test reviews of each whole length (Data::test_lengths, tokens before truncation): the
// buckets [0, bounds[0]], [bounds[0] + 1, bounds[1]], ..., [bounds.back() + 1, no limit]; bounds increasing.
// Where a longer --max-len gains (imdb eval --by-length; docs/imdb.md). Collective with a world, as evaluate.
struct LengthBucket {
  int64_t shortest = 0, longest = -1;  // tokens, both included; longest -1: no limit
  int64_t reviews = 0, correct = 0;
  double accuracy() const { return reviews > 0 ? double(correct) / double(reviews) : 0.0; }
};
std::vector<LengthBucket> accuracy_by_length(nn::TransformerClassifier& model, const Data& data,
                                             const std::vector<int64_t>& bounds, distributed::ProcessGroup* world = nullptr);

// A trained run loaded back from its folder (model.safetensors + vocab.txt), checked: settings,
// every tensor, the vocabulary the model was trained with.
struct SavedRun {
  TrainConfig config;
  Vocabulary vocabulary;
  std::shared_ptr<nn::TransformerClassifier> model;
};
SavedRun load_run(const std::string& folder);
// model.safetensors: the weights, the settings, the vocabulary's fingerprint and the checksum (what
// load_run checks); written atomically.
void save_model(const std::string& path, const TrainConfig& config, const nn::TransformerClassifier& model,
                const Vocabulary& vocabulary);
// SHA-256 of the vocabulary's tokens: model.safetensors records it, load_run checks vocab.txt against it.
std::string vocabulary_fingerprint(const Vocabulary& vocabulary);
// Probability that the review is positive.
double predict_positive(const SavedRun& run, const std::string& review);

// The device of a --device flag, checked: cuda:N with no such GPU (or no CUDA build) is an ember::Error.
Device checked_device(const std::string& name);
// Where a rank of `train` or `pretrain` computes: checked_device, and under mpirun (`several` ranks) a plain
// "cuda" is each rank's own GPU, cuda:(local rank % GPUs).
Device rank_device(const std::string& name, bool several);
// The group a rank's gradients travel in: `world` (MPI), or between the GPUs of several ranks an NCCL group,
// made here (collective) and kept in `nccl`.
distributed::ProcessGroup& gradient_group(distributed::ProcessGroup& world, Device device, double timeout_seconds,
                                          std::unique_ptr<distributed::ProcessGroup>& nccl);
// --zero shards AdamW's moments over the ranks: on one GPU process there are none to shard over (its world
// group holds CPU tensors), an ember::Error before anything is built.
void check_zero_has_ranks(bool zero, Device device, bool several);

// What the training loop (optim/train/loop.h) takes from a train or pretrain run's settings: its folder (`folder`,
// made for config.out under its lock), --save-every, --stop-after, --log-every, --quiet, the job's ranks; the run
// adds its steps, schedule, device, generator and hooks.
train::LoopSettings loop_settings_of(const TrainConfig& config, train::RunFolder& folder,
                                     distributed::ProcessGroup& world);

}  // namespace ember::imdb
