// The classifier's batch as the training layer's named arrays (optim/train/batch.h), and what it computes on them:
// its loss (the step's: train::HostStep from host arrays, train::DeviceStep on a GPU) and its right predictions
// (the evaluation's graphs, train::GraphEvaluator).
//   host_arrays: "tokens" [B, T] (int64), "mask" [B, T] (bool, true at padding), "labels" [B] (int64);
//   gpu_arrays: the same, with "positions" [1, T] (0 .. T-1) and, with bigram_buckets, "bigrams" [B, T] (the
//   tokens' hashed bigrams, nn/ngrams.h): a forward from staged ids computes neither on the GPU.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"
#include "core/tensor.h"
#include "examples/imdb/batcher.h"
#include "nn/transformer.h"
#include "optim/train/batch.h"

namespace ember::imdb {

// (host_arrays' mask on `device`, where the model is; the ids stay on the host: the embedding and cross-entropy
// check them there and upload them without waiting for the GPU.)
train::Batch host_arrays(const Batch& batch, Device mask_device = Device::cpu());
train::Batch gpu_arrays(const Batch& batch, const nn::ClassifierConfig& model);
// Which arrays are ids, and their bounds (tokens, positions and bigrams with the embedding backward's buckets).
train::Layout array_layout(const nn::ClassifierConfig& model);
// Each array's elements in a batch of `max_batch` reviews of model.max_len tokens.
std::map<std::string, int64_t> array_capacity(const nn::ClassifierConfig& model, int64_t max_batch);

// The cross-entropy of the model's logits on the batch: from host arrays (the ops check and upload the ids), or
// on the GPU from staged ones.
Tensor loss_on(const nn::TransformerClassifier& model, const train::Batch& batch);
Tensor loss_on(const nn::TransformerClassifier& model, const train::DeviceBatch& batch);
// The batch's right predictions, a float64 scalar on the GPU.
Tensor right_predictions(const nn::TransformerClassifier& model, const train::DeviceBatch& batch);

}  // namespace ember::imdb
