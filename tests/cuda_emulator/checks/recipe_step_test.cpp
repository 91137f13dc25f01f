// The IMDb recipe's training step at its full size (batch 32, T 256, 4 heads, 2 layers, dim 128,
// FFN 512, vocabulary 20,002, dropout 0.1), as the trainer runs it on one GPU, counted by the
// emulator (counters.h): op by op (--cuda-graph off), no host wait and no pageable copy from the
// batch's upload to the end of AdamW; as a CUDA graph (--cuda-graph on), a replayed step is one
// graph launch. The smaller
// tests beside it (step_counts_test.cpp, graph_train_step_test.cpp) check the same at small sizes,
// over more steps, and bit-equality; this one shows the counts at the recipe's own shapes.
// Built into ember_tests_emulated only.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "counters.h"
#include "examples/imdb/batcher.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/trainer.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/graph_step.h"
#include "optim/train/prefetch.h"
#include "tests/cuda_emulator/checks/small_recipe.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda(0);

// A batch of the shared checks' reviews (small_recipe.h), padded as --cuda-graph on pads them.
imdb::Batch recipe_batch(int64_t B, int64_t longest, int64_t vocab, int seed, int64_t max_len) {
  return imdb::pad_for_graphs(emulator_checks::make_batch(B, longest, vocab, seed, seed), max_len);
}

}  // namespace

TEST_CASE("emulator counts: the recipe's step at full size makes no host wait, and replays as one graph launch") {
  const imdb::TrainConfig recipe;  // the reference recipe's settings
  const nn::ClassifierConfig& config = recipe.model;
  REQUIRE(config.vocab_size == 20002);
  REQUIRE(config.dim == 128);
  REQUIRE(config.heads == 4);
  REQUIRE(config.layers == 2);
  REQUIRE(config.ffn_dim == 512);
  REQUIRE(config.max_len == 256);
  const int64_t B = recipe.batch_size, T = config.max_len;
  REQUIRE(B == 32);
  const imdb::Batch first = recipe_batch(B, T, config.vocab_size, 1, config.max_len);
  const imdb::Batch second = recipe_batch(B, T, config.vocab_size, 2, config.max_len);
  const imdb::Batch third = recipe_batch(B, T, config.vocab_size, 3, config.max_len);
  REQUIRE(first.seq_len == 256);

  // One model, as the trainer on one GPU runs it (train::DeviceStep): each batch uploaded on
  // the copy stream during the step before it (train::Prefetcher). A step op by op (--cuda-graph off),
  // then with --cuda-graph on the shape's first step (op by op, then captured), then a replay. Each
  // runs the whole recipe-size step on the emulator (about 6 s each on the 2-core build machine).
  Generator gen(recipe.seed);
  nn::TransformerClassifier model(config, gen);
  model.to(kGpu);
  model.train();
  optim::AdamW optimizer(imdb::parameter_groups(model, recipe.weight_decay), recipe.lr);
  train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, B));
  const train::DeviceLossFn loss_of = [&model](const train::DeviceBatch& batch) { return imdb::loss_on(model, batch); };
  const int64_t n = B * T;
  // A batch's upload: tokens and their buckets, positions and theirs, padding mask, labels.
  const int64_t batch_bytes = n * 8 + (3 * n + 2) * 8 + T * 8 + (3 * T + 2) * 8 + n + B * 8;

  // --cuda-graph off: from the first batch's upload to the end of AdamW, and the second's upload.
  ember_emu::reset_counts();
  prefetcher.prefetch(imdb::gpu_arrays(first, config));
  Tensor loss = train::step_on_device(model, optimizer, loss_of, prefetcher.take(), recipe.clip);
  prefetcher.release();
  prefetcher.prefetch(imdb::gpu_arrays(second, config));
  ember_emu::Counts c = ember_emu::counts();
  {
    INFO(ember_emu::describe(c));
    CHECK(c.host_waits.empty());
    CHECK(c.pageable_copies == 0);
    CHECK(c.bytes_to_host == 0);
    CHECK(c.graph_launches == 0);
    CHECK(c.kernel_launches > 100);
    CHECK(c.bytes_to_device == 2 * batch_bytes);
  }
  // A logging step reads the loss: one wait.
  ember_emu::reset_counts();
  CHECK(std::isfinite(loss.item<float>()));
  CHECK(ember_emu::counts().host_waits.size() == 1);

  // --cuda-graph on: the shape's first step runs op by op and is captured; the next replays it.
  train::GraphStep graphs(model, optimizer, gen, kGpu, loss_of, recipe.clip);
  ember_emu::reset_counts();
  graphs.run(prefetcher.take());
  prefetcher.release();
  prefetcher.prefetch(imdb::gpu_arrays(third, config));
  c = ember_emu::counts();
  CHECK_MESSAGE(c.host_waits.empty(), ember_emu::describe(c));
  CHECK(c.pageable_copies == 0);
  CHECK(graphs.counts().captures == 1);

  ember_emu::reset_counts();
  Tensor replayed = graphs.run(prefetcher.take());
  prefetcher.release();
  c = ember_emu::counts();
  INFO(ember_emu::describe(c));
  CHECK(graphs.counts().replays == 1);
  CHECK(c.host_waits.empty());
  CHECK(c.pageable_copies == 0);
  CHECK(c.bytes_to_host == 0);
  CHECK(c.graph_launches == 1);
  CHECK(c.kernel_launches == 2);  // the graph, and the copy of its loss
  CHECK(c.library_calls == 0);
  // The step's numbers (dropout's seed and offset, AdamW's 7 words); the batch went up before.
  CHECK(c.bytes_to_device == 16 + 56);
  CHECK(std::isfinite(replayed.item<float>()));
}
