// NBSVM's features (examples/imdb/ngram_features.h): hashed n-gram sets and naive-Bayes log-count ratios.
#include "examples/imdb/ngram_features.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "nn/ngrams.h"

namespace ember::imdb {

std::vector<int32_t> ngram_set(const std::vector<int32_t>& tokens, int64_t order, int64_t buckets) {
  EMBER_CHECK(order >= 1, "ngram_set: the order must be >= 1, got {}", order);
  EMBER_CHECK(buckets >= 1 && buckets < (int64_t(1) << 31), "ngram_set: buckets must be in [1, 2^31), got {}", buckets);
  const int64_t length = int64_t(tokens.size());
  const std::vector<int64_t> wide(tokens.begin(), tokens.end());
  std::vector<int32_t> ids;
  for (int64_t n = 1; n <= order; ++n)
    for (int64_t start = 0; start + n <= length; ++start)
      ids.push_back(int32_t(nn::ngram_id(wide.data() + start, n, buckets)));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<float> nb_log_count_ratios(const std::vector<std::vector<int32_t>>& sets, const std::vector<int>& labels,
                                       int64_t buckets, double alpha) {
  EMBER_CHECK(alpha > 0 && std::isfinite(alpha), "nb_log_count_ratios: alpha must be > 0, got {}", alpha);
  EMBER_CHECK(sets.size() == labels.size(), "nb_log_count_ratios: {} reviews but {} labels", sets.size(), labels.size());
  EMBER_CHECK(buckets >= 1, "nb_log_count_ratios: buckets must be >= 1, got {}", buckets);
  std::vector<double> positive(size_t(buckets), alpha), negative(size_t(buckets), alpha);
  for (size_t r = 0; r < sets.size(); ++r) {
    EMBER_CHECK(labels[r] == 0 || labels[r] == 1, "nb_log_count_ratios: review {} has label {}, not 0 or 1", r, labels[r]);
    std::vector<double>& counts = labels[r] == 1 ? positive : negative;
    for (int32_t id : sets[r]) {
      EMBER_CHECK(id >= 0 && id < buckets, "nb_log_count_ratios: review {} has id {} outside [0, {})", r, id, buckets);
      counts[size_t(id)] += 1;
    }
  }
  double positive_total = 0, negative_total = 0;
  for (size_t i = 0; i < size_t(buckets); ++i) positive_total += positive[i], negative_total += negative[i];
  std::vector<float> ratios(static_cast<size_t>(buckets));
  for (size_t i = 0; i < size_t(buckets); ++i)
    ratios[i] = float(std::log((positive[i] / positive_total) / (negative[i] / negative_total)));
  return ratios;
}

}  // namespace ember::imdb
