// Batcher: SplitMix64 + Fisher-Yates for the epoch order, then padding each batch to its longest review.
#include "examples/imdb/batcher.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ember::imdb {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound) {
  EMBER_CHECK(bound > 0, "SplitMix64::below: bound must be > 0");
  // Reject the lowest (2^64 mod bound) values so that every remainder is equally likely.
  uint64_t threshold = (0 - bound) % bound;
  while (true) {
    uint64_t value = next();
    if (value >= threshold) return value % bound;
  }
}

std::vector<int64_t> shuffled_order(int64_t count, uint64_t seed, int64_t epoch) {
  EMBER_CHECK(count >= 0, "shuffled_order: count must be >= 0, got {}", count);
  // One generator per (seed, epoch): mix the seed, then the epoch, through SplitMix64 so
  // that nearby seeds or epochs give unrelated orders.
  uint64_t mixed_seed = SplitMix64(seed).next() ^ SplitMix64(uint64_t(epoch) + 0x5EEDull).next();
  SplitMix64 generator(mixed_seed);
  std::vector<int64_t> order = in_order(count);
  // Fisher-Yates: swap each position (from the back) with a uniformly chosen earlier one.
  for (int64_t i = count - 1; i > 0; --i) {
    int64_t j = int64_t(generator.below(uint64_t(i) + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

std::vector<int64_t> Batcher::length_bucketed_order(uint64_t seed, int64_t epoch, int64_t pool_batches) const {
  EMBER_CHECK(pool_batches >= 1, "length_bucketed_order: pool_batches must be >= 1, got {}", pool_batches);
  std::vector<int64_t> order = shuffled_order(seed, epoch);
  const int64_t count = size();
  const int64_t pool = pool_batches > count / batch_size_ ? count : pool_batches * batch_size_;  // no overflow
  auto shorter = [&](int64_t a, int64_t b) { return reviews_[size_t(a)].size() < reviews_[size_t(b)].size(); };
  for (int64_t begin = 0; begin < count; begin += pool) {
    auto first = order.begin() + begin;
    std::stable_sort(first, first + std::min(pool, count - begin), shorter);
  }
  // The full batches in a shuffled order (a generator of its own, so the review order above is
  // shuffled_order's); the partial last batch, if any, keeps its place at the end.
  const int64_t full = count / batch_size_;
  std::vector<int64_t> batches = imdb::shuffled_order(full, seed ^ 0xB0C4E75ull, epoch);
  std::vector<int64_t> result;
  result.reserve(order.size());
  for (int64_t b : batches)
    result.insert(result.end(), order.begin() + b * batch_size_, order.begin() + (b + 1) * batch_size_);
  result.insert(result.end(), order.begin() + full * batch_size_, order.end());
  return result;
}

std::vector<int64_t> in_order(int64_t count) {
  EMBER_CHECK(count >= 0, "in_order: count must be >= 0, got {}", count);
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), int64_t(0));
  return order;
}

Batcher::Batcher(std::vector<std::vector<int32_t>> reviews, std::vector<int> labels, int64_t batch_size)
    : reviews_(std::move(reviews)), labels_(std::move(labels)), batch_size_(batch_size) {
  EMBER_CHECK(reviews_.size() == labels_.size(), "Batcher: {} reviews but {} labels", reviews_.size(),
              labels_.size());
  EMBER_CHECK(batch_size_ >= 1, "Batcher: batch_size must be >= 1, got {}", batch_size_);
  for (size_t i = 0; i < reviews_.size(); ++i) {
    for (int32_t id : reviews_[i]) EMBER_CHECK(id >= 0, "Batcher: review {} has a negative token id {}", i, id);
  }
}

Batch Batcher::batch(const std::vector<int64_t>& order, int64_t index) const {
  EMBER_CHECK(index >= 0 && index < num_batches(), "Batcher::batch: batch {} is out of range [0, {})", index,
              num_batches());
  return batch_rows(order, index, 0, rows_in(index));
}

Batch Batcher::batch_rows(const std::vector<int64_t>& order, int64_t index, int64_t first_row, int64_t count) const {
  EMBER_CHECK(int64_t(order.size()) == size(), "Batcher::batch: order has {} entries for {} reviews", order.size(),
              size());
  EMBER_CHECK(index >= 0 && index < num_batches(), "Batcher::batch: batch {} is out of range [0, {})", index,
              num_batches());
  EMBER_CHECK(first_row >= 0 && count >= 0 && first_row + count <= rows_in(index),
              "Batcher::batch_rows: rows [{}, {}) are not in batch {} of {} reviews", first_row, first_row + count,
              index, rows_in(index));
  // The whole batch's longest review sets the padding, whichever rows are asked for.
  Batch out;
  out.seq_len = 1;
  for (int64_t i = index * batch_size_, end = i + rows_in(index); i < end; ++i) {
    int64_t review = order[size_t(i)];
    EMBER_CHECK(review >= 0 && review < size(), "Batcher::batch: order[{}] = {} is not a review index", i, review);
    out.seq_len = std::max(out.seq_len, int64_t(reviews_[size_t(review)].size()));
  }
  const int64_t first = index * batch_size_ + first_row;
  out.batch = count;

  out.tokens.assign(size_t(out.batch * out.seq_len), 0);  // 0 = [PAD]
  out.key_mask.assign(size_t(out.batch * out.seq_len), 0);
  out.labels.resize(size_t(out.batch));
  for (int64_t row = 0; row < out.batch; ++row) {
    size_t review = size_t(order[size_t(first + row)]);
    const std::vector<int32_t>& ids = reviews_[review];
    size_t row_start = size_t(row * out.seq_len);
    std::copy(ids.begin(), ids.end(), out.tokens.begin() + std::ptrdiff_t(row_start));
    std::fill_n(out.key_mask.begin() + std::ptrdiff_t(row_start), ids.size(), uint8_t(1));
    out.labels[size_t(row)] = labels_[review];
    out.real_tokens += int64_t(ids.size());
  }
  return out;
}

Batch pad_for_graphs(const Batch& batch, int64_t max_len) {
  const int64_t T = batch.seq_len, B = batch.batch;
  const int64_t rounded = (T + kGraphPadMultiple - 1) / kGraphPadMultiple * kGraphPadMultiple;
  const int64_t padded = std::max(T, std::min(rounded, max_len));
  if (padded == T) return batch;
  Batch out = batch;
  out.seq_len = padded;
  out.tokens.assign(size_t(B * padded), 0);    // [PAD]
  out.key_mask.assign(size_t(B * padded), 0);  // padding
  for (int64_t r = 0; r < B; ++r) {
    std::copy_n(batch.tokens.begin() + r * T, T, out.tokens.begin() + r * padded);
    std::copy_n(batch.key_mask.begin() + r * T, T, out.key_mask.begin() + r * padded);
  }
  return out;
}

}  // namespace ember::imdb
