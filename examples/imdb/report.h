// The training report: one self-contained HTML page per run (report.html) with the loss per
// step, test accuracy and throughput per epoch, the run's settings, and attention heat maps of
// every head of every layer on a few short test reviews; and one page comparing head counts.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "examples/imdb/trainer.h"

namespace ember::imdb {

// ---- What a run logged (metrics.jsonl)
struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0;
  double accuracy = NAN;  // a pretraining's masked-token accuracy; NaN for a classifier's steps
};
struct EpochRecord {
  int64_t epoch = 0, step = 0;
  double train_loss = 0, test_accuracy = 0, train_seconds = 0, real_tokens_per_s = 0;
  double validation_accuracy = NAN;  // --validation runs only
  double masked_accuracy = NAN;      // a pretraining's (its test_accuracy is NaN)
};
struct Metrics {
  std::vector<StepRecord> steps;  // in step order; a step logged twice (resumed run) keeps its last line
  std::vector<EpochRecord> epochs;
  double final_test_accuracy = NAN;  // --test end: the test reviews read once, after the last epoch ("final" line)
};
// A classifier's or a pretraining's. Throws ember::Error naming the file and line on a missing file or a malformed
// line, and the field too on a field of the wrong type or out of range.
Metrics read_metrics(const std::string& path);

// ---- Attention on a few reviews
struct AttentionExample {
  std::vector<std::string> tokens;  // the review as the model saw it (vocabulary tokens, [UNK] included)
  int label = 0;                    // 1 = positive
  double p_positive = 0;            // the model's prediction
  int64_t shown = 0;                // tokens drawn (the first `shown`; < tokens.size() when cut)
  std::vector<std::vector<std::vector<double>>> maps;  // [layer][head] -> shown x shown weights, row-major
};
// Indices of `count` test reviews (half negative, half positive, in test order) with at most
// max_tokens tokens; when too few are that short, the shortest ones (their maps are cut).
std::vector<size_t> pick_reviews(const std::vector<std::vector<int32_t>>& reviews, const std::vector<int>& labels,
                                 int64_t count, int64_t max_tokens);
// Runs the model (eval mode, no grad) on one review and keeps every head's attention weights.
AttentionExample attention_example(nn::TransformerClassifier& model, const Vocabulary& vocabulary,
                                   const std::vector<int32_t>& review, int label, int64_t max_tokens);

// ---- Pages
struct RunReport {
  std::string title;                           // e.g. the run folder
  std::map<std::string, std::string> settings; // TrainConfig::to_metadata()
  int64_t parameters = 0;
  Metrics metrics;
  std::vector<AttentionExample> examples;
};
std::string render_run_report(const RunReport& report);

struct CompareColumn {  // one model of the comparison
  int64_t heads = 0;
  std::string folder;
  Metrics metrics;
  std::vector<AttentionExample> examples;  // the same reviews, in the same order, for every model
};
std::string render_compare_report(const std::string& title, const std::vector<CompareColumn>& models);

// ---- Building the pages from disk
constexpr int64_t kReportReviews = 4, kCompareReviews = 2, kMaxMapTokens = 40;

// report.html for a trained model in memory (train() calls this at the end); reads
// folder/metrics.jsonl. `data` holds the test reviews encoded with the model's vocabulary.
void write_run_report(const std::string& folder, const TrainConfig& config, nn::TransformerClassifier& model,
                      const Data& data);
// The same from a saved run (metrics.jsonl, model.safetensors or checkpoint.safetensors,
// vocab.txt); the test reviews come from `data_config` (data / data_dir). Returns the page's path.
std::string rebuild_run_report(const std::string& folder, const TrainConfig& data_config);
// compare.html in compare_folder from its heads<h>-seed<seed> runs. Returns the page's path.
std::string write_compare_report(const std::string& compare_folder, const std::vector<int64_t>& heads, int64_t seed,
                                 const TrainConfig& data_config);

}  // namespace ember::imdb
