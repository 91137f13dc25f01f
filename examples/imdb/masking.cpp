// Masked-token prediction's inputs: the draws (SplitMix64, the same on every platform) and the windows.
#include "examples/imdb/masking.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace ember::imdb {

namespace {

// A generator of its own for each (seed, step, row).
SplitMix64 row_generator(uint64_t seed, int64_t step, int64_t row) {
  SplitMix64 a(seed ^ 0x6D61736B696E6721ULL);  // "masking!": not the batch order's stream
  SplitMix64 b(a.next() + uint64_t(step));
  // NOTE: the row's stream starts at a hashed state: a state of (base + row x SplitMix64's own increment) would
  // make row r + 1's draws row r's shifted by one.
  SplitMix64 c(b.next() + uint64_t(row));
  return SplitMix64(c.next());
}

double uniform(SplitMix64& g) { return double(g.next() >> 11) * 0x1p-53; }

}  // namespace

MaskedBatch mask_tokens(const Batch& batch, int64_t mask_id, int64_t first_word, int64_t vocab_size, uint64_t seed,
                        int64_t step, int64_t first_row, const MaskingRates& rates) {
  EMBER_CHECK(first_word >= 0 && first_word < vocab_size && mask_id >= 0 && mask_id < vocab_size &&
                  vocab_size - first_word - (mask_id >= first_word ? 1 : 0) >= 1,
              "mask_tokens: no word to draw from ids [{}, {}) besides [MASK] = {}", first_word, vocab_size, mask_id);
  EMBER_CHECK(rates.choose > 0 && rates.choose <= 1 && rates.to_mask >= 0 && rates.to_random >= 0 &&
                  rates.to_mask + rates.to_random <= 1,
              "mask_tokens: rates choose {}, mask {}, random {} are not probabilities", rates.choose, rates.to_mask,
              rates.to_random);
  const int64_t T = batch.seq_len;
  MaskedBatch out;
  out.inputs = batch.tokens;
  // Words other than [MASK]: [first_word, vocab_size) with mask_id skipped.
  const uint64_t words = uint64_t(vocab_size - first_word - (mask_id >= first_word ? 1 : 0));
  for (int64_t r = 0; r < batch.batch; ++r) {
    SplitMix64 g = row_generator(seed, step, first_row + r);
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = size_t(r * T + t);
      // Three draws per position, padding included, so that a position's draws do not depend on the others.
      const double choose = uniform(g), kind = uniform(g);
      const uint64_t word = g.below(words);
      if (batch.key_mask[i] == 0 || choose >= rates.choose) continue;
      out.positions.push_back(int64_t(i));
      out.targets.push_back(batch.tokens[i]);
      if (kind < rates.to_mask) {
        out.inputs[i] = mask_id;
      } else if (kind < rates.to_mask + rates.to_random) {
        int64_t id = first_word + int64_t(word);
        if (id >= mask_id && mask_id >= first_word) ++id;
        out.inputs[i] = id;
      }
    }
  }
  if (out.positions.empty() && batch.real_tokens > 0) {
    // None chosen (a tiny batch): the first real token of a row drawn from the seed, replaced by [MASK].
    SplitMix64 g = row_generator(seed, step, -1 - first_row);
    std::vector<int64_t> real;
    for (size_t i = 0; i < batch.key_mask.size(); ++i)
      if (batch.key_mask[i] != 0) real.push_back(int64_t(i));
    const int64_t i = real[size_t(g.below(real.size()))];
    out.positions.push_back(i);
    out.targets.push_back(batch.tokens[size_t(i)]);
    out.inputs[size_t(i)] = mask_id;
  }
  return out;
}

std::vector<std::vector<int32_t>> review_windows(const std::vector<std::vector<int32_t>>& reviews, int64_t len) {
  EMBER_CHECK(len >= 1, "review_windows: a window of {} tokens", len);
  std::vector<std::vector<int32_t>> windows;
  for (const auto& review : reviews) {
    const int64_t n = int64_t(review.size());
    if (n <= len) {
      windows.push_back(review);
      continue;
    }
    for (int64_t start = 0;; start += len) {
      const int64_t begin = start + len >= n ? n - len : start;  // the last window ends at the review's end
      windows.emplace_back(review.begin() + begin, review.begin() + begin + len);
      if (begin + len >= n) break;
    }
  }
  return windows;
}

}  // namespace ember::imdb
