// The IMDb trainer: a run's settings, training with per-epoch evaluation, checkpoints that
// resume exactly, evaluation and prediction from a saved run.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/distributed/process_group.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/vocabulary.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"

namespace ember::imdb {

// Every setting of a run. The defaults are the reference recipe (../shared/imdb-recipe.md).
struct TrainConfig {
  nn::ClassifierConfig model;       // vocab 20,002; dim 128; 4 heads; 2 layers; FFN 512; max_len 256
  int64_t vocab_words = 20000;      // most frequent training tokens kept (+ [PAD], [UNK])
  int64_t batch_size = 32;
  int64_t epochs = 3;
  double lr = 5e-4;
  double weight_decay = 0.01;       // on weight matrices only
  double warmup = 0.05;             // fraction of all steps
  std::string schedule = "linear";  // linear | cosine | constant
  double clip = 1.0;                // global gradient norm; 0 = off
  uint64_t seed = 0;
  int threads = 0;                  // 0 = all cores
  std::string device = "cpu";
  std::string data;                 // reviews.json or aclImdb folder; empty = download into data_dir
  std::string data_dir;             // download cache; empty = $EMBER_DATA or ./data
  std::string out = "runs/imdb";
  int64_t limit = 0;                // use only the first N train and N test reviews (balanced); 0 = all
  int64_t save_every = 0;           // also checkpoint every N steps (0 = only at epoch ends)
  int64_t log_every = 50;           // plain log line every N steps when not on a terminal
  int64_t stop_after = 0;           // stop (after checkpointing) once this many steps are done; 0 = never
  bool resume = false;              // continue from out/checkpoint.safetensors
  bool quiet = false;
  // Data parallelism (under mpirun; docs/distributed.md). Not in the checkpoint: a run resumes on
  // any number of ranks, with or without ZeRO-1.
  int64_t bucket_kb = 256;          // gradients are all-reduced in buckets of about this many KiB
  bool overlap = true;              // ... during backward (false: all after it, for comparison)
  bool zero = false;                // ZeRO-1: AdamW's moments sharded over the ranks
  double dist_timeout = 300;        // seconds a collective may wait for the other ranks before the job ends

  std::map<std::string, std::string> to_metadata() const;
  // Every setting the ranks of a job must share (to_metadata() and the run's other settings; not
  // --threads or --quiet), checked at start-up.
  std::map<std::string, std::string> shared_settings() const;
  static TrainConfig from_metadata(const std::map<std::string, std::string>& metadata);
};

struct EpochResult {
  int64_t epoch = 0;
  double train_loss = 0;
  double test_accuracy = 0;    // on every test review
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
  std::vector<EpochResult> epochs;
  int64_t parameters = 0;
  int64_t steps = 0;
  double wall_seconds = 0;
  std::vector<double> step_losses;  // every step's loss, in order (this process's steps)
};

struct Data {
  Vocabulary vocabulary;
  std::vector<std::vector<int32_t>> train_tokens, test_tokens;
  std::vector<int> train_labels, test_labels;
};
// Loads (downloading if needed), applies --limit, builds the vocabulary (or uses the one
// given, e.g. a saved run's) and encodes.
Data prepare_data(const TrainConfig& config, const Vocabulary* vocabulary = nullptr);

// Trains with per-epoch test accuracy, writing metrics.jsonl, checkpoint.safetensors,
// model.safetensors and vocab.txt into config.out. With a world of several ranks (mpirun), each
// rank trains on its slice of every global batch (--batch-size stays global) and rank 0 alone
// prints and writes files; collective: every rank calls it with the same settings.
RunResult train(const TrainConfig& config);
RunResult train(const TrainConfig& config, const Data& data);
RunResult train(const TrainConfig& config, distributed::ProcessGroup& world);
RunResult train(const TrainConfig& config, const Data& data, distributed::ProcessGroup& world);

// AdamW's parameter groups of the recipe: weight matrices decay, biases, LayerNorm parameters
// and embeddings do not.
std::vector<optim::ParamGroup> parameter_groups(const nn::Module& model, double weight_decay);

// What a checkpoint holds, once checked: check_checkpoint() reads the file, rebuilds the model
// and optimiser it describes and loads every tensor into them, as --resume does. Throws
// ember::Error naming the file for anything a resume would stumble on.
struct CheckpointInfo {
  int64_t step = 0;
  uint64_t generator_offset = 0;
  TrainConfig config;
};
CheckpointInfo check_checkpoint(const std::string& path);

// Accuracy of `model` on encoded reviews (switched to eval mode and back, no grad). With a world,
// its ranks share the batches (the same batches as one process, so the same predictions) and the
// counts are summed: collective, every rank gets the accuracy.
double evaluate(nn::TransformerClassifier& model, const std::vector<std::vector<int32_t>>& reviews,
                const std::vector<int>& labels, int64_t batch_size = 64, distributed::ProcessGroup* world = nullptr);

// A trained run loaded back from its folder (model.safetensors + vocab.txt).
struct SavedRun {
  TrainConfig config;
  Vocabulary vocabulary;
  std::shared_ptr<nn::TransformerClassifier> model;
};
SavedRun load_run(const std::string& folder);
// Probability that the review is positive.
double predict_positive(const SavedRun& run, const std::string& review);

// Batch -> tensors: tokens int64 [B, T], key_padding_mask bool [B, T] (true = padding), labels int64 [B].
struct BatchTensors {
  Tensor tokens, padding_mask, labels;
};
// On `device` (copied there from the host).
BatchTensors to_tensors(const Batch& batch, Device device = Device::cpu());
// The device of a --device flag, checked: cuda:N with no such GPU (or no CUDA build) is an ember::Error.
Device checked_device(const std::string& name);

}  // namespace ember::imdb
