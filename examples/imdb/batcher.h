// Batches of encoded reviews: seeded per-epoch shuffling, dynamic padding and key-padding masks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace ember::imdb {

// One batch, padded to its own longest review.
struct Batch {
  int64_t batch = 0;               // B: reviews in this batch (the last batch may be smaller)
  int64_t seq_len = 0;             // T: length of the longest review in this batch
  std::vector<int64_t> tokens;     // B*T row-major token ids; 0 (= [PAD]) after a review ends
  std::vector<uint8_t> key_mask;   // B*T; 1 = real token, 0 = padding
  std::vector<int64_t> labels;     // B
  int64_t real_tokens = 0;         // number of 1s in key_mask (B*T counts padding too)
};

// For CUDA graphs (one per batch shape, optim/train/graph_step.h): `batch` padded with [PAD] to the next multiple
// of 32 tokens (at most max_len, and never shorter than it was), so a run of T 256 has at most 8 shapes.
constexpr int64_t kGraphPadMultiple = 32;
Batch pad_for_graphs(const Batch& batch, int64_t max_len);

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator whose output is the same on every
// platform and compiler, unlike std::shuffle and the std:: distributions.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, bound), without modulo bias; bound must be > 0.
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// Review order for one training epoch: a Fisher-Yates shuffle of 0..count-1 by a generator
// seeded from (seed, epoch). The same seed and epoch always give the same order.
std::vector<int64_t> shuffled_order(int64_t count, uint64_t seed, int64_t epoch);

// 0, 1, ..., count-1: the order for evaluation.
std::vector<int64_t> in_order(int64_t count);

// Usage:
//   Batcher batcher(vocabulary.encode_all(split.train), labels_of(split.train), 32);
//   std::vector<int64_t> order = batcher.shuffled_order(seed, epoch);   // or batcher.in_order()
//   for (int64_t b = 0; b < batcher.num_batches(); ++b) { Batch batch = batcher.batch(order, b); ... }
class Batcher {
 public:
  // reviews[i] are token ids (not padded), labels[i] its label. Throws ember::Error if the
  // sizes differ, batch_size < 1, or a token id is negative.
  Batcher(std::vector<std::vector<int32_t>> reviews, std::vector<int> labels, int64_t batch_size);

  int64_t size() const { return int64_t(reviews_.size()); }
  int64_t batch_size() const { return batch_size_; }
  // ceil(size / batch_size): the last, partial batch is kept. (Not (size + batch_size - 1) /
  // batch_size, which overflows for a batch size near INT64_MAX.)
  int64_t num_batches() const { return size() / batch_size_ + (size() % batch_size_ != 0 ? 1 : 0); }

  std::vector<int64_t> shuffled_order(uint64_t seed, int64_t epoch) const {
    return imdb::shuffled_order(size(), seed, epoch);
  }
  std::vector<int64_t> in_order() const { return imdb::in_order(size()); }
  // The shuffled order of the epoch, regrouped so that each batch holds reviews of similar length
  // (less padding; --length-buckets): consecutive pools of pool_batches batches' worth of the
  // shuffled reviews are each sorted by length and cut into batches, and the full batches are then
  // shuffled among themselves (a partial last batch stays last). pool_batches = 1 only sorts
  // inside each batch (the same batches as shuffled_order). Same seed and epoch, same order.
  std::vector<int64_t> length_bucketed_order(uint64_t seed, int64_t epoch, int64_t pool_batches) const;

  // Batch number `index` of an epoch whose review order is `order` (a permutation of 0..size-1).
  // NOTE: a review with no tokens gives an all-zero mask row; seq_len is at least 1.
  Batch batch(const std::vector<int64_t>& order, int64_t index) const;
  // Rows [first, first + count) of that batch (data parallelism: each rank's slice), padded to the
  // whole batch's longest review, so that they are exactly those rows of batch(order, index).
  Batch batch_rows(const std::vector<int64_t>& order, int64_t index, int64_t first, int64_t count) const;
  // The number of reviews in batch `index` (batch_size, or fewer in the last batch).
  int64_t rows_in(int64_t index) const { return std::min(batch_size_, size() - index * batch_size_); }

 private:
  std::vector<std::vector<int32_t>> reviews_;
  std::vector<int> labels_;
  int64_t batch_size_;
};

}  // namespace ember::imdb
