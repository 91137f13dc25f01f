// A training run's settings: their ranges, their text form in a checkpoint's metadata (parsed in
// full and range-checked when read back), and their agreement with the tensors of a saved model.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "nn/transformer.h"

namespace ember::imdb {

// The range of each setting, for the flags and for a saved run's metadata alike: far beyond
// any real run, small enough that no size computed from them overflows.
namespace limits {
constexpr int64_t max_heads = 1024, max_layers = 1024, max_dim = 1 << 16, max_ffn = 1 << 20, max_len = 1 << 20;
constexpr int64_t max_vocab_words = 1 << 30, max_batch_size = 1 << 20, max_epochs = 1'000'000, max_threads = 4096;
constexpr int64_t max_reviews = int64_t(1) << 40;  // --limit, --save-every, --stop-after, --log-every
constexpr int64_t max_bucket_kb = 1 << 20;         // 1 GiB
constexpr int64_t max_bigram_buckets = 1 << 26;   // --bigrams: 64 Mi rows
constexpr double max_dist_timeout = 1e9;          // seconds
}  // namespace limits

// Every setting of a run. The defaults are the reference recipe (../shared/imdb-recipe.md).
// A new setting is its member here and one row in setting_table.cpp (key, flag, help, range,
// checkpoint or not): the flags, validate(), the metadata and shared_settings() read the rows.
struct TrainConfig {
  nn::ClassifierConfig model;       // vocab 20,002; dim 128; 4 heads; 2 layers; FFN 512; max_len 256
  int64_t vocab_words = 20000;      // most frequent training tokens kept (+ [PAD], [UNK])
  int64_t batch_size = 32;
  int64_t epochs = 3;
  double lr = 5e-4;
  double weight_decay = 0.01;       // on weight matrices only
  double encoder_lr_scale = 1.0;    // the encoder's learning rate over the head's (a pretrained encoder, --init)
  double warmup = 0.05;             // fraction of all steps
  std::string schedule = "linear";  // linear | cosine | constant
  double clip = 1.0;                // global gradient norm; 0 = off
  uint64_t seed = 0;
  int threads = 0;                  // 0 = all cores
  std::string device = "cpu";
  std::string precision = "fp32";   // fp32 | bf16: products (and, on the CPU, activations) in bfloat16, float32 master weights (core/precision.h)
  std::string cuda_graph;           // on | off: the step as CUDA graphs, batches padded to a multiple of 32 tokens
                                    // (optim/train/graph_step.h); empty: on for --device cuda, off otherwise
  std::string data;                 // reviews.json or aclImdb folder; empty = download into data_dir
  std::string data_dir;             // download cache; empty = $EMBER_DATA or ./data
  std::string out = "runs/imdb";
  int64_t limit = 0;                // use only the first N train and N test reviews (balanced); 0 = all
  int64_t validation = 0;           // hold out N of the training reviews (after --limit) as a validation set,
                                    // evaluated each epoch, for choosing settings or an epoch without looking at
                                    // test; the same N reviews for every run and seed; 0 = none (the recipe)
  std::string test = "auto";        // when the test reviews are read: epoch (after every epoch), end (once, after
                                    // the last), auto (end with a validation set, else epoch: tests_every_epoch)
  int64_t save_every = 0;           // also checkpoint every N steps (0 = only at epoch ends)
  int64_t log_every = 50;           // plain log line every N steps when not on a terminal
  int64_t stop_after = 0;           // stop (after checkpointing) once this many steps are done; 0 = never
  std::string truncate = "head";    // a review longer than max_len: head | tail | head+tail (truncation.h)
  int64_t length_buckets = 0;       // 0: the recipe's shuffle; N: batches of similar lengths from pools of
                                    // N batches (Batcher::length_bucketed_order), less padding
  // The model's attention (model.attention_window / attention_global, --attention) and activation
  // checkpointing (model.checkpoint, --checkpoint) are in `model`.
  bool resume = false;              // continue from out/checkpoint.safetensors
  bool overwrite = false;           // a new run in `out` even over a run of another kind (run_folder.h), whose
                                    // files it removes first
  std::string init;                 // an `imdb pretrain` folder: the classifier's encoder starts from its
                                    // encoder.safetensors, its reviews encoded with its vocab.txt (encoder_file.h)
  bool quiet = false;
  // Data parallelism (under mpirun; docs/distributed.md). Not in the checkpoint: a run resumes on
  // any number of ranks, with or without ZeRO-1.
  int64_t bucket_kb = 256;          // gradients are all-reduced in buckets of about this many KiB
  bool overlap = true;              // ... during backward (false: all after it, for comparison)
  bool zero = false;                // ZeRO-1: AdamW's moments sharded over the ranks
  double dist_timeout = 300;        // seconds a collective may wait for the other ranks before the job ends

  // Throws ember::Error naming the setting if one is out of its row's range (limits above) or
  // choices (an unknown schedule), or they disagree (dim not divisible by heads, an attention
  // window longer than max_len, global tokens without a window).
  void validate() const;
  // --cuda-graph as it applies: on, or off (the padding changes dropout's draws, so a resume must match).
  bool uses_cuda_graph() const;
  // --test: the test reviews read after every epoch (epoch; auto without --validation), or once at the end.
  bool tests_every_epoch() const;
  // The settings that make a run what it is (what --resume must match: the checkpoint rows of
  // setting_table.h), as text. from_metadata parses each in full (an integer is decimal digits
  // only: "1e3", "12abc", "3.5" are errors), checks its range, takes a row's `before` text for a
  // file written before the row existed, and validate()s the whole.
  std::map<std::string, std::string> to_metadata() const;
  static TrainConfig from_metadata(const std::map<std::string, std::string>& metadata);
  // Every setting the ranks of a job must share (to_metadata() and the run's other settings; not
  // --threads or --quiet), checked at start-up.
  std::map<std::string, std::string> shared_settings() const;
};

// The model's sizes in the settings must be those of the tensors present (vocabulary, width,
// positions, layers, feed-forward width, classes): checked before a model is built from them,
// so that a small file claiming a huge model is an error, not gigabytes allocated.
// `tensors` are the model's (prefix removed); errors name `path`.
void check_settings_match_tensors(const nn::ClassifierConfig& model, const std::map<std::string, Tensor>& tensors,
                                  const std::string& path);

// Whole-text number parsing, for flags and metadata alike: nullopt unless `text` is exactly a
// decimal integer (optional '-', digits; no '+', spaces, exponent or fraction) in [min, max], or
// exactly a finite number in [min, max].
std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max);
std::optional<uint64_t> parse_unsigned(const std::string& text);
std::optional<double> parse_real(const std::string& text, double min, double max);

}  // namespace ember::imdb
