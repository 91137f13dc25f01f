// Hashed bigram ids: the word-pair feature fastText adds beside its words (Joulin et al., 2016), for a
// model that learns an embedding per pair of neighbouring tokens without a vocabulary of pairs.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::nn {

// tokens: int64 [B, T] (any device). Returns int64 [B, T] on the CPU: position t holds the pair
// (tokens[t-1], tokens[t]) hashed into [0, buckets), the first position the pair ([PAD] = 0, tokens[0])
// ("the review starts with"). Padding positions get a pair's id too; the model masks them out.
// Distinct pairs may share an id (a collision), as fastText's do; more buckets, fewer collisions.
// Throws ember::Error for tokens that are not int64 [B, T], a negative token, or buckets < 1.
Tensor hashed_bigrams(const Tensor& tokens, int64_t buckets);

// The id of one pair (what hashed_bigrams computes at each position).
int64_t bigram_id(int64_t previous, int64_t token, int64_t buckets);

}  // namespace ember::nn
