// The classifier's batch as the training layer's named arrays (optim/train/batch.h), and what it computes on them
// on a GPU: its loss (the step's, train::DeviceStep) and its right predictions (the evaluation's graphs,
// train::GraphEvaluator). The arrays: "tokens" [B, T] and "positions" [1, T] (0 .. T-1) with the embedding
// backward's buckets, "mask" [B, T] (bool, true at padding), "labels" [B], and with bigram_buckets "bigrams"
// [B, T] (the tokens' hashed bigrams, nn/bigrams.h, with buckets).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "examples/imdb/batcher.h"
#include "nn/transformer.h"
#include "optim/train/batch.h"

namespace ember::imdb {

train::Batch named_arrays(const Batch& batch, const nn::ClassifierConfig& model);
// Which arrays are ids, and their bounds.
train::Layout array_layout(const nn::ClassifierConfig& model);
// Each array's elements in a batch of `max_batch` reviews of model.max_len tokens.
std::map<std::string, int64_t> array_capacity(const nn::ClassifierConfig& model, int64_t max_batch);

// The cross-entropy of the model's logits on the batch.
Tensor loss_on(const nn::TransformerClassifier& model, const train::DeviceBatch& batch);
// The batch's right predictions, a float64 scalar on the GPU.
Tensor right_predictions(const nn::TransformerClassifier& model, const train::DeviceBatch& batch);

}  // namespace ember::imdb
