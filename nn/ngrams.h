// Hashed n-gram ids: the word n-gram features fastText adds beside its words (Joulin et al., 2016), for a model
// without a vocabulary of n-grams. One hash for every user: the NBSVM baseline's n-grams (examples/imdb/
// ngram_features.h) and the classifier's bigram embeddings (ClassifierConfig::bigram_buckets).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::nn {

// The id of the n-gram tokens[0 .. n-1] in [0, buckets): a chain of core/random.h's splitmix64, each token mixed
// into the hash of the ones before it, from a seed that differs with n (a word and a pair never share an id by
// construction). The same id on every run and machine; distinct n-grams may share one (a collision), as
// fastText's do: more buckets, fewer collisions. Tokens are read as 32-bit (ids below 2^31).
int64_t ngram_id(const int64_t* tokens, int64_t n, int64_t buckets);

// Which hash a model's bigram ids come from: ngram (ngram_id of the pair), or pair, the first bigram models'
// (a hash of the pair packed in 64 bits, before the one hash): a model file keeps the ids it was trained with.
enum class BigramHash { ngram, pair };

// The id of the pair (previous, token): what hashed_bigrams computes at each position.
int64_t bigram_id(int64_t previous, int64_t token, int64_t buckets, BigramHash hash = BigramHash::ngram);

// tokens: int64 [B, T] (any device). Returns int64 [B, T] on the CPU: position t holds the pair
// (tokens[t-1], tokens[t])'s id, the first position the pair ([PAD] = 0, tokens[0]) ("the review starts with").
// Padding positions get a pair's id too; the model masks them out.
// Throws ember::Error for tokens that are not int64 [B, T], a negative token, or buckets < 1.
Tensor hashed_bigrams(const Tensor& tokens, int64_t buckets, BigramHash hash = BigramHash::ngram);

}  // namespace ember::nn
