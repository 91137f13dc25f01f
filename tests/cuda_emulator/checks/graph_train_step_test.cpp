// The IMDb trainer's step as CUDA graphs (the training layer's, optim/train/graph_step.h), on the emulator: a replayed
// step is one graph launch with no host wait and no pageable copy from the batch's upload to the
// end of AdamW, and graph steps give the eager steps' losses and weights bit for bit, over a
// schedule that changes the learning rate every step, with dropout on and two padded shapes.
// Built into ember_tests_emulated only (it reads the emulator's counts).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/cuda_ops.h"
#include "counters.h"
#include "examples/imdb/trainer.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/graph_step.h"
#include "tests/cuda_emulator/checks/small_recipe.h"
#include "tests/cuda_skip.h"

using namespace ember;
using emulator_checks::host;
using emulator_checks::Run;
using emulator_checks::small_recipe;

namespace {

const Device kGpu = Device::cuda(0);

// A batch whose labels alternate from review to review, starting at seed % 2.
imdb::Batch make_batch(int64_t B, int64_t longest, int64_t vocab, int seed) {
  return emulator_checks::make_batch(B, longest, vocab, seed, seed);
}


}  // namespace

// The recipe's step is batch 32, T 256, 4 heads, 2 layers, dim 128, vocabulary 20002: about 26
// GFLOP, about 6 s a step on the emulator (recipe_step_test.cpp runs it, once each way). Here, over
// seven steps: batch 4, T 32 and 64 (two padded shapes, so two graphs), dim 32, vocabulary 300. The
// counts asserted do not depend on those sizes (one launch per op whatever its size, the same
// copies); the heads and layers, which change the graph's contents, are the recipe's.
TEST_CASE("cuda graphs: the IMDb step replays as one launch with no host wait, and equals the eager steps bit for bit") {
  const nn::ClassifierConfig config = small_recipe();
  const int64_t B = 4;
  // Longest reviews of 50, 20, 64, 33, 9, 61, 40 tokens: padded to 64, 32, 64, 64, 32, 64, 64.
  const std::vector<int64_t> longest = {50, 20, 64, 33, 9, 61, 40};
  std::vector<imdb::Batch> batches;
  for (size_t s = 0; s < longest.size(); ++s)
    batches.push_back(imdb::pad_for_graphs(make_batch(B, longest[s], config.vocab_size, int(s) + 1), config.max_len));
  CHECK(batches[0].seq_len == 64);
  CHECK(batches[1].seq_len == 32);
  CHECK(batches[4].seq_len == 32);
  // Warm-up over 3 steps, then a linear decay: a new learning rate every step.
  const optim::Schedule schedule{optim::ScheduleKind::WarmupLinear, 2e-3, 3, int64_t(batches.size())};

  Run eager(7), graphed(7);
  train::GraphStep graphs(graphed.model, graphed.optimizer, graphed.gen, kGpu, graphed.loss(), 1.0);
  emulator_checks::StagedBatches staged{config, {}};
  for (size_t s = 0; s < batches.size(); ++s) {
    INFO("step " << s + 1 << ", T " << batches[s].seq_len);
    const double lr = schedule.lr_at(int64_t(s));
    eager.optimizer.set_lr(lr);
    const Tensor eager_loss = eager.eager_step(batches[s]);

    graphed.optimizer.set_lr(lr);
    const bool replay = s != 0 && s != 1;  // each shape's first step runs eagerly, then is captured
    ember_emu::reset_counts();
    const Tensor loss = graphs.run(staged(batches[s]));  // from the batch's upload to the end of AdamW
    const ember_emu::Counts c = ember_emu::counts();
    INFO(ember_emu::describe(c));
    CHECK(c.host_waits.empty());
    CHECK(c.pageable_copies == 0);
    CHECK(c.bytes_to_host == 0);
    if (replay) {
      CHECK(c.graph_launches == 1);
      CHECK(c.kernel_launches == 2);  // the graph, and the copy of its loss (the next replay rewrites it)
      CHECK(c.library_calls == 0);
      // Uploaded before the replay: tokens and their buckets, the padding mask, the labels, dropout's
      // seed and offset, AdamW's numbers (an AdamHyper in 7 words).
      const int64_t n = B * batches[s].seq_len;
      CHECK(c.bytes_to_device == n * 8 + (3 * n + 2) * 8 + n + B * 8 + 16 + 56);
    } else {
      CHECK(c.graph_launches == 0);
      CHECK(c.kernel_launches > 100);  // the step ran op by op
    }
    CHECK(host(loss) == host(eager_loss));
    CHECK(graphed.optimizer.step_count() == eager.optimizer.step_count());
    CHECK(graphed.gen.offset() == eager.gen.offset());
  }
  CHECK(graphs.counts().eager == 2);
  CHECK(graphs.counts().captures == 2);
  CHECK(graphs.counts().replays == int64_t(batches.size()) - 2);
  const auto eager_named = eager.model.named_parameters(), graphed_named = graphed.model.named_parameters();
  REQUIRE(eager_named.size() == graphed_named.size());
  for (size_t i = 0; i < eager_named.size(); ++i) {
    INFO("parameter " << eager_named[i].first);
    CHECK(host(graphed_named[i].second) == host(eager_named[i].second));
  }
  const auto eager_state = eager.optimizer.state_dict(), graphed_state = graphed.optimizer.state_dict();
  CHECK(host(graphed_state.at("0.exp_avg_sq")) == host(eager_state.at("0.exp_avg_sq")));
  CHECK(graphed_state.at("step").item<int64_t>() == int64_t(batches.size()));
}

// --encoder-lr-scale: two learning rates, so AdamW's numbers on the device are two sets (one per rate),
// staged before each replay; the replays still equal the eager steps bit for bit.
TEST_CASE("cuda graphs: with the encoder at half the head's learning rate, replays equal the eager steps bit for bit") {
  const nn::ClassifierConfig config = small_recipe();
  Run eager(3, config, 0.5), graphed(3, config, 0.5), one_rate(3, config);
  train::GraphStep graphs(graphed.model, graphed.optimizer, graphed.gen, kGpu, graphed.loss(), 1.0);
  emulator_checks::StagedBatches staged{config, {}};
  for (int s = 0; s < 4; ++s) {
    INFO("step " << s + 1);
    const imdb::Batch batch = imdb::pad_for_graphs(make_batch(4, 30 + s % 2, config.vocab_size, s + 1), config.max_len);
    const double lr = 1e-3 * (s + 1);
    eager.optimizer.set_lr(lr);
    graphed.optimizer.set_lr(lr);
    one_rate.optimizer.set_lr(lr);
    const Tensor eager_loss = eager.eager_step(batch);
    one_rate.eager_step(batch);
    ember_emu::reset_counts();
    const Tensor loss = graphs.run(staged(batch));
    const ember_emu::Counts c = ember_emu::counts();
    if (s >= 1) {  // captured at step 2, then replayed: AdamW's numbers are two AdamHypers of 7 words
      CHECK(c.graph_launches == 1);
      const int64_t n = 4 * batch.seq_len;
      CHECK(c.bytes_to_device == n * 8 + (3 * n + 2) * 8 + n + 4 * 8 + 16 + 2 * 56);
    }
    CHECK(host(loss) == host(eager_loss));
  }
  CHECK(graphs.counts().replays == 3);
  const auto graphed_state = graphed.model.state_dict();
  for (const auto& [name, p] : eager.model.state_dict()) {
    INFO("parameter " << name);
    CHECK(host(graphed_state.at(name)) == host(p));
  }
  // The scale took effect: the encoder's weights differ from those of the run at one rate.
  CHECK(host(eager.model.state_dict().at("blocks.0.fc1.weight")) !=
        host(one_rate.model.state_dict().at("blocks.0.fc1.weight")));
}

TEST_CASE("cuda graphs: AdamW with its numbers on the device refuses a step whose numbers were not staged") {
  // NOTE: each refused step() has counted itself (as any step() that fails part-way).
  Run run(8);
  run.optimizer.keep_numbers_on_device(kGpu);
  const imdb::Batch batch = imdb::pad_for_graphs(make_batch(2, 10, 300, 1), 64);
  run.optimizer.stage_step();
  run.eager_step(batch);  // staged: fine
  std::string message;
  try {
    run.eager_step(batch);  // not staged again: the device holds the last step's numbers
  } catch (const std::exception& e) {
    message = e.what();
  }
  CHECK(message.find("stage_step() was not called before it") != std::string::npos);

  // A learning rate set after the staging would not reach the GPU: refused too.
  run.optimizer.stage_step();
  run.optimizer.set_lr(5e-4);
  message.clear();
  try {
    run.eager_step(batch);
  } catch (const std::exception& e) {
    message = e.what();
  }
  CHECK(message.find("set_lr(0.0005) came after stage_step()") != std::string::npos);
}

// The recipe's other settings under graphs: activation checkpointing (--checkpoint: each block's
// forward recomputed in the backward, its dropout masks drawn again) with sliding-window attention
// (--attention window: a band of 8 and a global token), the composed attention (the default on a
// GPU) and the fused kernels (EMBER_ATTENTION=fused). Small sizes, two padded shapes.
// Before the band mask was kept on the GPU (outside_band in autograd/ops/attention.cpp), each forward uploaded it
// from the host, which a capture refuses: every step ran op by op, with a warning.
TEST_CASE("cuda graphs: with --checkpoint and window attention, replays equal the eager steps bit for bit") {
  for (const bool fused : {false, true}) {
    INFO((fused ? "fused attention" : "composed attention"));
    testing::AttentionKernels kernels(fused);
    nn::ClassifierConfig config = small_recipe();
    config.checkpoint = true;
    config.attention_window = 8;
    config.attention_global = 1;
    const int64_t B = 3;
    const std::vector<int64_t> longest = {40, 17, 64, 30, 12};  // padded to 64, 32, 64, 32, 32
    std::vector<imdb::Batch> batches;
    for (size_t s = 0; s < longest.size(); ++s)
      batches.push_back(imdb::pad_for_graphs(make_batch(B, longest[s], config.vocab_size, int(s) + 3), config.max_len));
    const optim::Schedule schedule{optim::ScheduleKind::WarmupLinear, 2e-3, 2, int64_t(batches.size())};
    Run eager(9, config), graphed(9, config);
    train::GraphStep graphs(graphed.model, graphed.optimizer, graphed.gen, kGpu, graphed.loss(), 1.0);
  emulator_checks::StagedBatches staged{config, {}};
    for (size_t s = 0; s < batches.size(); ++s) {
      INFO("step " << s + 1 << ", T " << batches[s].seq_len);
      const double lr = schedule.lr_at(int64_t(s));
      eager.optimizer.set_lr(lr);
      const Tensor eager_loss = eager.eager_step(batches[s]);
      graphed.optimizer.set_lr(lr);
      ember_emu::reset_counts();
      const Tensor loss = graphs.run(staged(batches[s]));
      const ember_emu::Counts c = ember_emu::counts();
      INFO(ember_emu::describe(c));
      CHECK(c.host_waits.empty());
      CHECK(c.pageable_copies == 0);
      if (s >= 2) CHECK(c.graph_launches == 1);
      CHECK(host(loss) == host(eager_loss));
      CHECK(graphed.gen.offset() == eager.gen.offset());
    }
    CHECK(graphs.counts().captures == 2);
    CHECK(graphs.counts().replays == int64_t(batches.size()) - 2);
    const auto eager_named = eager.model.named_parameters(), graphed_named = graphed.model.named_parameters();
    REQUIRE(eager_named.size() == graphed_named.size());
    for (size_t i = 0; i < eager_named.size(); ++i) {
      INFO("parameter " << eager_named[i].first);
      CHECK(host(graphed_named[i].second) == host(eager_named[i].second));
    }
  }
}
