// The classifier's batch as named arrays, its loss and its right predictions on them
// (examples/imdb/classifier_arrays.h).
#include "examples/imdb/classifier_arrays.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "autograd/ops.h"
#include "nn/ngrams.h"

namespace ember::imdb {

train::Batch host_arrays(const Batch& batch, Device mask_device) {
  const int64_t B = batch.batch, T = batch.seq_len;
  Tensor mask = Tensor::empty({B, T}, Dtype::Bool);
  bool* padding = mask.data<bool>();
  for (size_t i = 0; i < batch.key_mask.size(); ++i) padding[i] = batch.key_mask[i] == 0;
  return {{"tokens", from_vector(batch.tokens, {B, T})},
          {"mask", mask_device.is_cpu() ? mask : mask.to(mask_device)},
          {"labels", from_vector(batch.labels, {B})}};
}

train::Batch gpu_arrays(const Batch& batch, const nn::ClassifierConfig& model) {
  train::Batch arrays = host_arrays(batch);
  arrays["positions"] = arange(batch.seq_len).view({1, batch.seq_len});
  if (model.bigram_buckets > 0) arrays["bigrams"] = nn::hashed_bigrams(arrays.at("tokens"), model.bigram_buckets, model.bigram_hash);
  return arrays;
}

train::Layout array_layout(const nn::ClassifierConfig& model) {
  train::Layout layout{{"tokens", {.id_bound = model.vocab_size, .buckets = true}},
                       {"positions", {.id_bound = model.max_len, .buckets = true, .same_per_shape = true}},
                       {"labels", {.id_bound = model.classes}}};
  if (model.bigram_buckets > 0) layout["bigrams"] = {.id_bound = model.bigram_buckets, .buckets = true};
  return layout;
}

std::map<std::string, int64_t> array_capacity(const nn::ClassifierConfig& model, int64_t max_batch) {
  const int64_t n = max_batch * model.max_len;
  std::map<std::string, int64_t> capacity{
      {"tokens", n}, {"positions", model.max_len}, {"mask", n}, {"labels", max_batch}};
  if (model.bigram_buckets > 0) capacity["bigrams"] = n;
  return capacity;
}

Tensor loss_on(const nn::TransformerClassifier& model, const train::Batch& batch) {
  return cross_entropy(model.forward(batch.at("tokens"), batch.at("mask")), batch.at("labels"));
}

Tensor loss_on(const nn::TransformerClassifier& model, const train::DeviceBatch& batch) {
  const Tensor logits = model.forward(batch.ids_at("tokens"), batch.ids_at("positions"), batch.at("mask"),
                                      batch.find_ids("bigrams"));
  return cross_entropy(logits, batch.ids_at("labels"));
}

Tensor right_predictions(const nn::TransformerClassifier& model, const train::DeviceBatch& batch) {
  const Tensor predicted = argmax(model.forward(batch.ids_at("tokens"), batch.ids_at("positions"), batch.at("mask"),
                                                batch.find_ids("bigrams")),
                                  1);
  return sum(eq(predicted, batch.at("labels")).to(Dtype::Float64));
}

}  // namespace ember::imdb
