// What the emulator's training-step checks share (graph_train_step_test.cpp, prefetch_test.cpp): the
// recipe's model at small sizes, batches of reviews as the trainer's Batcher makes them, and a model on
// the GPU with its optimiser that takes the trainer's eager step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "autograd/ops.h"
#include "core/gpu_stream.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/trainer.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"  // clip_grad_norm_
#include "optim/train/batch.h"
#include "optim/train/graph_step.h"

namespace ember::emulator_checks {

// The recipe's model but for its sizes: 4 heads, 2 layers, dropout 0.1.
inline nn::ClassifierConfig small_recipe() {
  nn::ClassifierConfig config;
  config.vocab_size = 300;
  config.max_len = 64;
  config.dim = 32;
  config.heads = 4;
  config.layers = 2;
  config.ffn_dim = 64;
  config.dropout = 0.1;
  return config;
}

// A batch of B reviews of at most `longest` tokens (the first that long, some shorter), as the Batcher
// makes them; `seed` varies the tokens and lengths, and review r's label is (r + label_shift) % 2.
inline imdb::Batch make_batch(int64_t B, int64_t longest, int64_t vocab, int seed, int label_shift) {
  imdb::Batch b;
  b.batch = B;
  b.seq_len = longest;
  b.tokens.assign(size_t(B * longest), 0);
  b.key_mask.assign(size_t(B * longest), 0);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t length = r == 0 ? longest : 1 + (r * 7 + seed) % longest;
    for (int64_t t = 0; t < length; ++t) {
      b.tokens[size_t(r * longest + t)] = 1 + (r * 131 + t * 17 + seed * 5) % (vocab - 1);
      b.key_mask[size_t(r * longest + t)] = 1;
    }
    b.labels.push_back((r + label_shift) % 2);
    b.real_tokens += length;
  }
  return b;
}

// A model on GPU 0 (weights from `seed`), in training mode, with the recipe's AdamW parameter groups.
struct Run {
  Generator gen;
  nn::TransformerClassifier model;
  optim::AdamW optimizer;
  explicit Run(uint64_t seed, const nn::ClassifierConfig& config = small_recipe(), double encoder_lr_scale = 1.0)
      : gen(seed), model(config, gen), optimizer(imdb::parameter_groups(model, 0.01, encoder_lr_scale), 1e-3) {
    model.to(Device::cuda(0));
    model.train();
  }
  // The trainer's step with --cuda-graph off and no prefetching: the batch's ids checked on the host
  // and uploaded by the embedding and cross-entropy, on the compute stream.
  Tensor eager_step(const imdb::Batch& batch) {
    const train::Batch t = imdb::host_arrays(batch, Device::cuda(0));
    Tensor loss = cross_entropy(model.forward(t.at("tokens"), t.at("mask")), t.at("labels"));
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
    return loss;
  }
  // The classifier's loss on a batch on the GPU (the training layer's steps take it).
  train::DeviceLossFn loss() {
    return [this](const train::DeviceBatch& batch) { return imdb::loss_on(model, batch); };
  }
  // The trainer's step on one GPU op by op (train::DeviceStep without graphs), on a batch already there.
  Tensor device_step(const train::DeviceBatch& inputs, double clip) {
    return train::step_on_device(model, optimizer, loss(), inputs, clip);
  }
};

// Batches staged on GPU 0 on the compute stream, one DeviceBatch per length (as a graph keeps its inputs per
// shape: the positions go up once per length).
struct StagedBatches {
  nn::ClassifierConfig config;
  std::map<int64_t, train::DeviceBatch> by_length;
  const train::DeviceBatch& operator()(const imdb::Batch& batch) {
    train::DeviceBatch& into = by_length[batch.seq_len];
    train::stage(imdb::gpu_arrays(batch, config), imdb::array_layout(config), Device::cuda(0), GpuStream::Compute,
                 into);
    return into;
  }
};

inline std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

}  // namespace ember::emulator_checks
