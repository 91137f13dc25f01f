// Masked-token prediction's inputs (BERT, Devlin et al. 2019): of a batch's real tokens, each is chosen
// with probability 15%; a chosen token is replaced by [MASK] (80%), by a random word (10%) or kept
// (10%), and the model predicts the original token at the chosen positions only.
#pragma once
#include <cstdint>
#include <vector>

#include "examples/imdb/batcher.h"

namespace ember::imdb {

struct MaskingRates {
  double choose = 0.15;     // of the real tokens, the share predicted
  double to_mask = 0.8;     // of those, replaced by [MASK]
  double to_random = 0.1;   // of those, replaced by a random word (the rest are kept as they are)
};

struct MaskedBatch {
  std::vector<int64_t> inputs;     // B*T: the batch's tokens, the chosen ones replaced
  std::vector<int64_t> positions;  // the chosen positions (row * T + column), increasing
  std::vector<int64_t> targets;    // the original token at each chosen position
};

// Chooses and replaces the tokens of `batch` (padding is never chosen). `mask_id` is [MASK]'s id; a
// random word is drawn uniformly from the ids [first_word, vocab_size) other than mask_id. Each row's
// draws depend on (seed, step, first_row + its row) alone: a step's masks are the same however the
// batch is split over ranks, and the same when a run resumes. A batch with real tokens has at least
// one chosen position (when the draws choose none, one real token of the batch is chosen).
MaskedBatch mask_tokens(const Batch& batch, int64_t mask_id, int64_t first_word, int64_t vocab_size, uint64_t seed,
                        int64_t step, int64_t first_row = 0, const MaskingRates& rates = {});

// The windows of `len` tokens that pretraining reads from each review: a review of at most `len` tokens is
// one window; a longer one is cut into consecutive windows of `len` tokens, the last of which ends at the
// review's end (it overlaps the one before it), so every token is in a window and every window is full.
std::vector<std::vector<int32_t>> review_windows(const std::vector<std::vector<int32_t>>& reviews, int64_t len);

}  // namespace ember::imdb
