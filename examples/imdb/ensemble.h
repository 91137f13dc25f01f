// Several trained runs as one classifier (imdb eval and imdb predict with more than one --run): the mean
// of their probabilities that a review is positive. Each run encodes the reviews with its own vocabulary
// and truncation, so runs of different settings (--bigrams, an --init encoder, another --max-len) combine,
// and so do runs of either kind: a Transformer (imdb train) and an NBSVM (imdb nbsvm, examples/imdb/nbsvm.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "examples/imdb/nbsvm.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/trainer.h"
#include "nn/transformer.h"

namespace ember::imdb {

// P(positive) of each review, in the order given: eval mode, no gradients, batches of similar lengths
// (as evaluate()'s; padding never changes a prediction), on the model's device.
std::vector<double> positive_probabilities(nn::TransformerClassifier& model,
                                           const std::vector<std::vector<int32_t>>& reviews, int64_t batch_size = 64);

struct EnsembleResult {
  std::vector<double> run_accuracies;  // each run alone, in the order of the folders
  double accuracy = 0;                 // the mean probability's (positive when > 0.5, as argmax)
  int64_t reviews = 0;
};
// The runs in `folders` (each checked as load_run checks it) on every test review, or with `validation` on
// the training reviews they held out (--validation: every run must have held out the same ones, the same
// --validation and --limit, else an ember::Error). `data` gives --data and --data-dir.
EnsembleResult evaluate_ensemble(const std::vector<std::string>& folders, const TrainConfig& data, bool validation);

// One member, loaded from its folder and checked (load_run, or load_nbsvm where the folder holds an NBSVM).
struct EnsembleMember {
  std::optional<SavedRun> transformer;
  std::optional<NbsvmModel> nbsvm;
  const TrainConfig& config() const { return transformer ? transformer->config : nbsvm->config.run; }
  const Vocabulary& vocabulary() const { return transformer ? transformer->vocabulary : nbsvm->vocabulary; }
  // P(positive) of reviews encoded with vocabulary(), in order (a Transformer in the precision it was trained in).
  std::vector<double> probabilities(const std::vector<std::vector<int32_t>>& reviews) const;
  double predict(const std::string& review) const;  // of one review's text
};
EnsembleMember load_member(const std::string& folder);

// The mean over `members` of their predict().
double predict_ensemble(const std::vector<EnsembleMember>& members, const std::string& review);

}  // namespace ember::imdb
