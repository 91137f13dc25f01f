// The next batch, uploaded on the copy stream while the current step runs (optim/train/prefetch.h),
// on the emulator, whose streams and events keep a GPU's ordering (work runs only when something
// needs it): the upload of batch n + 1 completes while step n's work has not run, the steps' losses
// and weights equal those of the steps without prefetching bit for bit, op by op and as CUDA
// graphs, and no step makes the host wait. Built into ember_tests_emulated only.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "autograd/ops.h"
#include "core/copy_stream.h"
#include "counters.h"
#include "examples/imdb/classifier_arrays.h"
#include "examples/imdb/trainer.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/train/graph_step.h"
#include "optim/train/prefetch.h"
#include "tests/cuda_emulator/checks/small_recipe.h"

using namespace ember;
using emulator_checks::host;
using emulator_checks::Run;
using emulator_checks::small_recipe;

namespace {

const Device kGpu = Device::cuda(0);

// Batches n and n + 2 (one buffer set) differ in every label: the labels shift by 0 for seed % 4 in {0, 1}
// and by 1 for {2, 3}, so seeds s and s + 2 give opposite labels.
imdb::Batch make_batch(int64_t B, int64_t longest, int64_t vocab, int seed) {
  return emulator_checks::make_batch(B, longest, vocab, seed, seed % 4 < 2 ? 0 : 1);
}


void check_same_weights(Run& a, Run& b) {
  const auto an = a.model.named_parameters(), bn = b.model.named_parameters();
  REQUIRE(an.size() == bn.size());
  for (size_t i = 0; i < an.size(); ++i) {
    INFO("parameter " << an[i].first);
    CHECK(host(bn[i].second) == host(an[i].second));
  }
}

// Steps as the trainer runs them on one GPU with `graphs` on or off, against the same steps without
// prefetching: losses and weights bit for bit, the upload of batch n + 1 complete while step n's
// work has not run, and no host wait from a batch's take to the next batch's upload.
void check_prefetched_steps(bool graphs) {
  const nn::ClassifierConfig config = small_recipe();
  const int64_t B = 4;
  // Longest reviews of 50, 20, 64, 33, 9, 61: with graphs padded to 64, 32, 64, 64, 32, 64.
  const std::vector<int64_t> longest = {50, 20, 64, 33, 9, 61};
  std::vector<imdb::Batch> batches;
  for (size_t s = 0; s < longest.size(); ++s) {
    imdb::Batch b = make_batch(B, longest[s], config.vocab_size, int(s) + 1);
    batches.push_back(graphs ? imdb::pad_for_graphs(b, config.max_len) : b);
  }
  const optim::Schedule schedule{optim::ScheduleKind::WarmupLinear, 2e-3, 2, int64_t(batches.size())};

  Run plain(11), fetched(11);
  std::optional<train::GraphStep> plain_graphs, fetched_graphs;
  if (graphs) {
    plain_graphs.emplace(plain.model, plain.optimizer, plain.gen, kGpu, plain.loss(), 1.0);
    fetched_graphs.emplace(fetched.model, fetched.optimizer, fetched.gen, kGpu, fetched.loss(), 1.0);
  }
  emulator_checks::StagedBatches staged{config, {}};
  std::vector<std::vector<float>> plain_losses;
  for (size_t n = 0; n < batches.size(); ++n) {
    plain.optimizer.set_lr(schedule.lr_at(int64_t(n)));
    plain_losses.push_back(host(graphs ? plain_graphs->run(staged(batches[n])) : plain.eager_step(batches[n])));
  }

  // The trainer's order: take batch n, queue step n, release it, prefetch batch n + 1. No loss is
  // read until the end, so that the emulator runs the steps only when something needs them.
  train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, B));
  prefetcher.prefetch(imdb::gpu_arrays(batches[0], config));
  std::vector<Tensor> losses;
  for (size_t n = 0; n < batches.size(); ++n) {
    INFO("step " << n + 1 << ", T " << batches[n].seq_len << (graphs ? ", graphs" : ", op by op"));
    fetched.optimizer.set_lr(schedule.lr_at(int64_t(n)));
    ember_emu::reset_counts();
    const train::DeviceBatch& inputs = prefetcher.take();
    losses.push_back(graphs ? fetched_graphs->run(inputs) : fetched.device_step(inputs, 1.0));
    prefetcher.release();
    GpuEvent step_done(kGpu);
    step_done.record(GpuStream::Compute);
    const bool more = n + 1 < batches.size();
    if (more) prefetcher.prefetch(imdb::gpu_arrays(batches[n + 1], config));
    const ember_emu::Counts c = ember_emu::counts();
    {
      INFO(ember_emu::describe(c));
      CHECK(c.host_waits.empty());
      CHECK(c.pageable_copies == 0);
      CHECK(c.bytes_to_host == 0);
      if (graphs && n >= 2) CHECK(c.graph_launches == 1);
      if (more && (!graphs || n >= 2)) {  // (a graph's first step of a shape also uploads its positions)
        // Batch n + 1 went up: its ids and buckets, mask, labels, and its positions and theirs when
        // its slot last held another length (batch n - 1; a slot keeps them per length); with
        // graphs also the step's numbers: dropout's seed and offset, AdamW's 7 words.
        const int64_t m = B * batches[n + 1].seq_len, T = batches[n + 1].seq_len;
        const bool new_length = n == 0 || batches[n - 1].seq_len != T;
        CHECK(c.bytes_to_device == m * 8 + (3 * m + 2) * 8 + (new_length ? T * 8 + (3 * T + 2) * 8 : 0) + m + B * 8 +
                                       (graphs ? 16 + 56 : 0));
      }
    }
    if (more && n % 2 == 1) {
      // The GPU may run the upload of batch n + 1 before step n ends: polling its event runs the
      // copy stream, and what that waits for (step n - 1, the last reader of its buffers), not step n.
      while (!prefetcher.last_upload().query()) {
      }
      CHECK_FALSE(step_done.query());  // step n's work has not run yet
    }
  }
  for (size_t n = 0; n < batches.size(); ++n) {
    INFO("step " << n + 1);
    CHECK(host(losses[n]) == plain_losses[n]);
  }
  CHECK(prefetcher.uploads() == int64_t(batches.size()));
  check_same_weights(plain, fetched);
  if (graphs) {
    CHECK(fetched_graphs->counts().replays == int64_t(batches.size()) - 2);
    CHECK(fetched_graphs->counts().captures == 2);
  }
}

}  // namespace

TEST_CASE("batch prefetch: the next batch's upload runs on the copy stream during the step, op by op, losses unchanged") {
  check_prefetched_steps(/*graphs=*/false);
}

TEST_CASE("batch prefetch: the next batch's upload runs on the copy stream during the step, as CUDA graphs, losses unchanged") {
  check_prefetched_steps(/*graphs=*/true);
}

// A slot uploads its positions only when the length changes; a batch of the length its slot held
// before kept them but lost their bound (0: "embedding: the ids were checked against 0 rows", the
// trainer's --device cuda --cuda-graph off run stopped at its third step).
TEST_CASE("batch prefetch: a batch of its slot's last length keeps its positions and their bound") {
  const nn::ClassifierConfig config = small_recipe();
  const int64_t B = 2;
  train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, B));
  Run run(5);
  for (int n = 0; n < 4; ++n) {
    INFO("batch " << n + 1);
    prefetcher.prefetch(imdb::gpu_arrays(make_batch(B, 12, config.vocab_size, n + 1), config));
    const train::DeviceBatch& inputs = prefetcher.take();
    CHECK(inputs.ids_at("positions").bound == config.max_len);
    CHECK(inputs.at("positions").shape() == Shape{1, 12});
    CHECK(std::isfinite(host(run.device_step(inputs, 1.0)).at(0)));
    prefetcher.release();
  }
}

// NOTE: the emulator runs queued work early where a GPU may (a staging block's event queried by the
// next upload, or polled as above), so an upload is often done by the time its step runs, wait or
// no wait. Here nothing runs the copy stream before each step but the step's own wait: the loss is
// read by a synchronous cudaMemcpy (it runs the compute stream, not the non-blocking copy stream),
// before the next batch is prefetched. A step that did not wait would read its labels before they
// arrived: those of the batch two before, the opposite ones.
TEST_CASE("batch prefetch: the step waits on the GPU for its batch's upload") {
  const nn::ClassifierConfig config = small_recipe();
  const int64_t B = 4;
  Run plain(12), fetched(12);
  train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, B));
  for (int n = 0; n < 5; ++n) {
    INFO("step " << n + 1);
    const imdb::Batch batch = make_batch(B, 10 + 7 * n, config.vocab_size, n + 1);
    prefetcher.prefetch(imdb::gpu_arrays(batch, config));
    const train::DeviceBatch& inputs = prefetcher.take();
    const Tensor loss = fetched.device_step(inputs, 1.0);
    prefetcher.release();
    float value = 0;
    REQUIRE(cudaMemcpy(&value, loss.raw_data(), sizeof value, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(value == host(plain.eager_step(batch))[0]);
  }
  check_same_weights(plain, fetched);
}

TEST_CASE("batch prefetch: misuse is an error naming it") {
  const nn::ClassifierConfig config = small_recipe();
  train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, 4));
  auto message_of = [](auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message_of([&] { prefetcher.take(); }).find("no batch was prefetched") != std::string::npos);
  imdb::Batch bad = make_batch(2, 8, 300, 1);
  bad.tokens[3] = 300;  // out of the vocabulary
  const std::string out_of_range = message_of([&] { prefetcher.prefetch(imdb::gpu_arrays(bad, config)); });
  CHECK(out_of_range.find("array 'tokens'") != std::string::npos);
  CHECK(out_of_range.find("out of range [0, 300)") != std::string::npos);
  prefetcher.prefetch(imdb::gpu_arrays(make_batch(2, 8, 300, 1), config));
  CHECK(message_of([&] { prefetcher.prefetch(imdb::gpu_arrays(make_batch(2, 8, 300, 2), config)); }).find("was not taken") != std::string::npos);
  prefetcher.take();
  CHECK(message_of([&] { prefetcher.take(); }).find("no batch was prefetched") != std::string::npos);
  prefetcher.release();
  CHECK(message_of([&] { prefetcher.release(); }).find("no batch was taken") != std::string::npos);
}

// A batch larger than the capacity it was given: its arrays get new buffers (filled after the work queued before),
// and the steps on it and after it are those without prefetching.
TEST_CASE("batch prefetch: a batch larger than its capacity gets new buffers, losses unchanged") {
  const nn::ClassifierConfig config = small_recipe();
  Run plain(13), fetched(13);
  train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, 2));
  const std::vector<int64_t> rows = {2, 5, 5, 3, 6};  // capacities of 2 reviews, then 5, then 6
  for (size_t n = 0; n < rows.size(); ++n) {
    INFO("step " << n + 1 << ", " << rows[n] << " reviews");
    const imdb::Batch batch = make_batch(rows[n], config.max_len - int64_t(n), config.vocab_size, int(n) + 1);
    prefetcher.prefetch(imdb::gpu_arrays(batch, config));
    const Tensor loss = fetched.device_step(prefetcher.take(), 1.0);
    prefetcher.release();
    CHECK(host(loss) == host(plain.eager_step(batch)));
  }
  check_same_weights(plain, fetched);
}

// A prefetcher dropped with an upload still queued (a run stopped part-way): its buffers go back to
// the caching allocator, which hands them to the compute stream's next work; that work must not be
// overwritten by the upload when the copy stream gets to it.
TEST_CASE("batch prefetch: buffers given back with an upload queued are not written after their next use") {
  const nn::ClassifierConfig config = small_recipe();
  const int64_t B = 4;
  {
    train::Prefetcher prefetcher(kGpu, imdb::array_layout(config), imdb::array_capacity(config, B));
    prefetcher.prefetch(imdb::gpu_arrays(make_batch(B, config.max_len, config.vocab_size, 1), config));  // never taken
  }
  // NOTE: the upload's last copy, the labels, is still queued (the staging pool's polls ran the
  // others). Blocks of the labels' size, among them the labels' own, written on the compute stream
  // and read.
  std::vector<Tensor> reused;
  for (int i = 0; i < 16; ++i) reused.push_back(Tensor::empty({B}, Dtype::Int64, kGpu).fill_(7));
  const std::vector<int64_t> sevens(size_t(B), 7);
  for (const Tensor& t : reused) CHECK(t.to(Device::cpu()).to_vector<int64_t>() == sevens);
  // Then the copy stream runs whatever it still had queued.
  GpuEvent copy_done(kGpu);
  copy_done.record(GpuStream::Copy);
  while (!copy_done.query()) {
  }
  for (const Tensor& t : reused) CHECK(t.to(Device::cpu()).to_vector<int64_t>() == sevens);
}
