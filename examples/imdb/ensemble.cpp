// Several runs as one classifier: their probabilities averaged (examples/imdb/ensemble.h).
#include "examples/imdb/ensemble.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/precision.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/folder_commands.h"

namespace ember::imdb {

std::vector<double> positive_probabilities(nn::TransformerClassifier& model,
                                           const std::vector<std::vector<int32_t>>& reviews, int64_t batch_size) {
  EMBER_CHECK(model.config.classes == 2, "positive_probabilities: the model gives {} classes, expected 2 (negative, "
              "positive)", model.config.classes);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> order = in_order(int64_t(reviews.size()));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return reviews[a].size() < reviews[b].size(); });
  Batcher batcher(reviews, std::vector<int>(reviews.size(), 0), batch_size);
  const Device device = model.parameters().front().device();
  std::vector<double> out(reviews.size());
  for (int64_t b = 0; b < batcher.num_batches(); ++b) {
    const train::Batch t = host_arrays(batcher.batch(order, b), device);
    const std::vector<float> p = softmax(model.forward(t.at("tokens"), t.at("mask")), 1).to(Device::cpu()).to_vector<float>();
    for (int64_t r = 0; r < t.at("tokens").size(0); ++r) out[size_t(order[size_t(b * batch_size + r)])] = p[size_t(2 * r + 1)];
  }
  model.train(was_training);
  return out;
}

EnsembleResult evaluate_ensemble(const std::vector<std::string>& folders, const TrainConfig& data, bool validation) {
  EMBER_CHECK(!folders.empty(), "evaluate_ensemble: no runs");
  EnsembleResult result;
  std::vector<double> sum;
  std::vector<int> labels;
  int64_t held_out = -1, of_limit = -1;  // the first run's --validation and --limit
  for (const std::string& folder : folders) {
    const EnsembleMember member = load_member(folder);
    TrainConfig config = member.config();
    config.data = data.data;
    config.data_dir = data.data_dir;
    if (!validation) {
      config.limit = 0;  // every test review
    } else {
      EMBER_CHECK(config.validation > 0, "ensemble: run '{}' held out no validation reviews (trained without --validation)",
                  folder);
      if (held_out < 0) {
        held_out = config.validation;
        of_limit = config.limit;
      }
      EMBER_CHECK(config.validation == held_out && config.limit == of_limit,
                  "ensemble: run '{}' held out --validation {} of --limit {}, the first run --validation {} of --limit {}: "
                  "not the same reviews", folder, config.validation, config.limit, held_out, of_limit);
    }
    const Data d = prepare_data(config, &member.vocabulary());  // encoded with the run's own vocabulary
    const auto& reviews = validation ? d.validation_tokens : d.test_tokens;
    const auto& these_labels = validation ? d.validation_labels : d.test_labels;
    if (labels.empty()) {
      labels = these_labels;
      sum.assign(labels.size(), 0.0);
    }
    EMBER_CHECK(these_labels == labels, "ensemble: run '{}' reads other reviews than the first run", folder);
    const std::vector<double> p = member.probabilities(reviews);
    for (size_t i = 0; i < p.size(); ++i) sum[i] += p[i];
    result.run_accuracies.push_back(accuracy_of(p, labels));
  }
  for (double& p : sum) p /= double(folders.size());  // now the mean probability
  result.reviews = int64_t(labels.size());
  result.accuracy = accuracy_of(sum, labels);
  return result;
}

std::vector<double> EnsembleMember::probabilities(const std::vector<std::vector<int32_t>>& reviews) const {
  if (nbsvm) return nbsvm_probabilities(*nbsvm, reviews);
  MixedPrecisionGuard precision(parse_precision(transformer->config.precision));  // as the run was trained and evaluated
  return positive_probabilities(*transformer->model, reviews);
}

double EnsembleMember::predict(const std::string& review) const {
  return nbsvm ? nbsvm_predict(*nbsvm, review) : predict_positive(*transformer, review);
}

EnsembleMember load_member(const std::string& folder) {
  check_classifies(folder);  // a pretraining or a folder of runs: say what to give instead
  EnsembleMember member;
  if (is_nbsvm_run(folder)) member.nbsvm.emplace(load_nbsvm(folder));
  else member.transformer.emplace(load_run(folder));
  return member;
}

double predict_ensemble(const std::vector<EnsembleMember>& members, const std::string& review) {
  EMBER_CHECK(!members.empty(), "predict_ensemble: no runs");
  double sum = 0;
  for (const EnsembleMember& member : members) sum += member.predict(review);
  return sum / double(members.size());
}

}  // namespace ember::imdb
