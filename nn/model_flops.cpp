// The classifier's model FLOPs: the formula of nn/model_flops.h, written once.
#include "nn/model_flops.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace ember::nn {

int64_t attended_pairs(const ClassifierConfig& config, int64_t len) {
  EMBER_CHECK(len >= 0, "attended_pairs: the length must be >= 0, got {}", len);
  const int64_t window = config.attention_window;
  if (window < 0 || window >= len - 1) return len * len;  // full attention (a window this wide is full)
  const int64_t global = std::min(config.attention_global, len);
  int64_t pairs = global * len;  // the global queries see every key
  for (int64_t i = global; i < len; ++i) {
    const int64_t lo = std::max<int64_t>(0, i - window), hi = std::min(len - 1, i + window);
    pairs += (hi - lo + 1) + std::min(global, lo);  // the band, and the global keys left of it
  }
  return pairs;
}

double forward_flops(const ClassifierConfig& config, int64_t len) {
  const double d = double(config.dim), f = double(config.ffn_dim), L = double(len);
  const double projections = L * (8 * d * d + 4 * d * f);                 // QKV, output projection, FFN
  const double attention = 4 * double(attended_pairs(config, len)) * d;  // Q K^T and P V over all heads
  const double head = 2 * d * double(config.classes);
  return double(config.layers) * (projections + attention) + head;
}

double training_step_flops(const ClassifierConfig& config, int64_t batch, int64_t len) {
  EMBER_CHECK(batch >= 0, "training_step_flops: the batch must be >= 0, got {}", batch);
  return 3 * double(batch) * forward_flops(config, len);
}

}  // namespace ember::nn
