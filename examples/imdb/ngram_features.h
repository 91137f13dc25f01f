// The features of NBSVM (Wang and Manning, 2012): each review as the set of its word n-grams, and each
// n-gram's naive-Bayes log-count ratio, which scales the feature a linear model reads (examples/imdb/nbsvm.h).
#pragma once
#include <cstdint>
#include <vector>

namespace ember::imdb {

// The review's n-grams for n = 1 .. order (their ids: nn::ngram_id, nn/ngrams.h, one table for every n, as
// fastText's buckets), each present once (the features are binary: "the review has
// it"), as sorted distinct ids. Throws ember::Error for order < 1 or buckets outside [1, 2^31).
std::vector<int32_t> ngram_set(const std::vector<int32_t>& tokens, int64_t order, int64_t buckets);

// The naive-Bayes log-count ratio of each id over the training reviews' sets:
//   r = log((p / |p|_1) / (q / |q|_1)),  p = alpha + positive reviews having it, q = alpha + negative ones,
// summed over all `buckets` for the norms. r > 0 leans positive; an id no review has gets log(|q|_1 / |p|_1).
// Throws ember::Error for alpha <= 0, sets and labels of different counts, a label not 0 or 1, or an id
// outside [0, buckets).
std::vector<float> nb_log_count_ratios(const std::vector<std::vector<int32_t>>& sets, const std::vector<int>& labels,
                                       int64_t buckets, double alpha);

}  // namespace ember::imdb
