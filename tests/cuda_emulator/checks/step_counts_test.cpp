// What one training step asks of the GPU, counted by the emulator (counters.h): the recipe's step
// (the trainer's: upload, forward, cross-entropy, backward, clipping, AdamW) must not make the host
// wait for the GPU between the upload of its batch and the end of the optimiser's step, and must
// not copy from or to pageable memory. Built into ember_tests_emulated only.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "autograd/ops.h"
#include "counters.h"
#include "examples/imdb/trainer.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace ember;

namespace {

// One step of the recipe's model as examples/imdb/trainer.cpp runs it on a GPU: tokens and labels
// stay on the host (the embedding and cross-entropy check them there and upload them through
// pinned staging), the padding mask is uploaded, and clipping keeps its norm on the GPU.
// Returns the loss, still on the GPU.
Tensor recipe_step(nn::TransformerClassifier& model, optim::AdamW& optimizer, const Tensor& tokens,
                   const Tensor& mask, const Tensor& labels) {
  const Device gpu = Device::cuda(0);
  Tensor padding_mask = mask.to(gpu);
  Tensor loss = cross_entropy(model.forward(tokens, padding_mask), labels);
  optimizer.zero_grad();
  loss.backward();
  optim::clip_grad_norm_(model.parameters(), 1.0);
  optimizer.step();
  return loss;
}

struct Batch {
  Tensor tokens, mask, labels;
};
Batch make_batch(int64_t B, int64_t T, int64_t vocab, int seed) {
  std::vector<int64_t> tokens(size_t(B * T)), labels(static_cast<size_t>(B));
  Batch b;
  b.mask = Tensor::empty({B, T}, Dtype::Bool);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t length = T - (r * 3 + seed) % (T / 2);  // some padding in most rows
    for (int64_t t = 0; t < T; ++t) {
      tokens[size_t(r * T + t)] = t < length ? 1 + (r * 131 + t * 17 + seed) % (vocab - 1) : 0;
      b.mask.data<bool>()[r * T + t] = t >= length;
    }
    labels[size_t(r)] = (r + seed) % 2;
  }
  b.tokens = from_vector(tokens, {B, T});
  b.labels = from_vector(labels, {B});
  return b;
}

}  // namespace

// The recipe's step is batch 32, T 256, 4 heads, dim 128, vocabulary 20002. Here it is batch 4,
// T 16, dim 32 and vocabulary 300 (recipe_step_test.cpp runs the full size, the trainer's way): the host waits,
// launches and copies counted do not depend on those sizes, since every op runs the same code path
// (one launch per op whatever its size, the same copies) and the batch's uploads stay under the
// staging limit (16 MiB; the recipe's tokens are 64 KiB). The number of heads and layers, which do
// change the counts, are the recipe's.
TEST_CASE("emulator counts: a non-logging training step makes no host wait and no pageable copy") {
  nn::ClassifierConfig config;
  config.vocab_size = 300;
  config.max_len = 16;
  config.dim = 32;
  config.heads = 4;
  config.layers = 2;
  config.ffn_dim = 64;
  Generator gen(3);
  nn::TransformerClassifier model(config, gen);
  model.to(Device::cuda(0));
  model.train();
  optim::AdamW optimizer(imdb::parameter_groups(model, 0.01), 1e-3);
  const int64_t B = 4, T = 16;

  // The first step also allocates (the caching allocator's cudaMalloc, the optimiser's state, the
  // staging blocks); it must not wait either.
  Batch first = make_batch(B, T, config.vocab_size, 1);
  ember_emu::reset_counts();
  Tensor loss1 = recipe_step(model, optimizer, first.tokens, first.mask, first.labels);
  ember_emu::Counts c1 = ember_emu::counts();
  CHECK_MESSAGE(c1.host_waits.empty(), ember_emu::describe(c1));
  CHECK_MESSAGE(c1.pageable_copies == 0, ember_emu::describe(c1));

  Batch second = make_batch(B, T, config.vocab_size, 2);
  ember_emu::reset_counts();
  Tensor loss2 = recipe_step(model, optimizer, second.tokens, second.mask, second.labels);
  ember_emu::Counts c2 = ember_emu::counts();
  INFO(ember_emu::describe(c2));
  CHECK(c2.host_waits.empty());
  CHECK(c2.pageable_copies == 0);
  CHECK(c2.bytes_to_host == 0);
  // The batch went up: tokens (as the embedding's ids and its backward's buckets), mask, labels.
  CHECK(c2.bytes_to_device >= B * T * (8 + 1) + B * 8);
  CHECK(c2.kernel_launches > 100);  // the step really ran on the device
  CHECK(c2.launches_by_kernel.count("clip_scale_kernel") == 1);

  // A logging step reads the loss: exactly one host wait, at that read.
  ember_emu::reset_counts();
  const float value = loss2.item<float>();
  ember_emu::Counts c3 = ember_emu::counts();
  CHECK(std::isfinite(value));
  CHECK_MESSAGE(c3.host_waits.size() == 1, ember_emu::describe(c3));
  CHECK(loss1.item<float>() > 0);
}

TEST_CASE("emulator counts: a wait is named by its call site, and a pageable copy is seen") {
  // A read of a GPU tensor: one wait, named by its .cu line and the host functions that asked.
  Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3}).to(Device::cuda(0));
  ember_emu::reset_counts();
  std::vector<float> back = x.to(Device::cpu()).to_vector<float>();
  ember_emu::Counts c = ember_emu::counts();
  CHECK(back == std::vector<float>{1, 2, 3});
  CHECK(c.host_waits.size() == 1);
  CHECK(c.pageable_copies == 0);  // through pinned staging
  CHECK(c.bytes_to_host == 12);
  const std::string text = ember_emu::describe(c);
  INFO(text);
  CHECK(text.find("cudaEventSynchronize at runtime.cu:") != std::string::npos);
  CHECK(text.find("copy_bytes_across_devices") != std::string::npos);

  // The mistakes on purpose: a copy from pageable memory (a wait and a pageable copy), and a
  // synchronous cudaMemcpy (a wait), each counted.
  std::vector<float> pageable(3, 0.0f);
  ember_emu::reset_counts();
  REQUIRE(cudaMemcpyAsync(x.raw_data(), pageable.data(), 12, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
  REQUIRE(cudaMemcpy(pageable.data(), x.raw_data(), 12, cudaMemcpyDeviceToHost) == cudaSuccess);
  c = ember_emu::counts();
  CHECK(c.pageable_copies == 2);
  REQUIRE(c.host_waits.size() == 2);
  CHECK(c.host_waits[0].call == "cudaMemcpyAsync with pageable host memory");
  CHECK(c.host_waits[0].site.find("step_counts_test.cpp:") == 0);
  CHECK(c.host_waits[1].call == "cudaMemcpy");

  // Pinned memory does not wait.
  void* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, 12) == cudaSuccess);
  ember_emu::reset_counts();
  REQUIRE(cudaMemcpyAsync(x.raw_data(), pinned, 12, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
  c = ember_emu::counts();
  CHECK(c.host_waits.empty());
  CHECK(c.pageable_copies == 0);
  CHECK(c.bytes_to_device == 12);
  REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
}

// Before the warp kernels, softmax and layer norm launched one 256-thread block per row (counted by
// the emulator: softmax_forward_kernel, 256 blocks for 256 rows): 32768 blocks for the recipe's
// attention softmax ([32, 4, 256, 256]) and 8192 for each layer norm ([32, 256, 128]). Now a warp
// per row, 8 rows per block, at most 512 blocks: 1/64 and 1/16 of those.
TEST_CASE("emulator counts: softmax and layer norm at the recipe's shapes launch at most 1/16 of one block per row") {
  const Device gpu = Device::cuda(0);
  Generator gen(5);
  Tensor scores = uniform({32, 4, 256, 256}, -4, 4, gen).to(gpu).requires_grad_();
  Tensor grad = uniform({32, 4, 256, 256}, -1, 1, gen).to(gpu);
  const int64_t softmax_rows = 32 * 4 * 256;
  ember_emu::reset_counts();
  softmax(scores, -1).backward(grad);
  ember_emu::Counts c = ember_emu::counts();
  INFO(ember_emu::describe(c));
  CHECK(c.launches_by_kernel.count("softmax_forward_kernel") == 0);
  REQUIRE(c.launches_by_kernel["softmax_forward_warp_kernel"] == 1);
  REQUIRE(c.launches_by_kernel["softmax_backward_warp_kernel"] == 1);
  CHECK(c.blocks_by_kernel["softmax_forward_warp_kernel"] * 16 <= softmax_rows);
  CHECK(c.blocks_by_kernel["softmax_backward_warp_kernel"] * 16 <= softmax_rows);

  Tensor x = uniform({32, 256, 128}, -2, 2, gen).to(gpu).requires_grad_();
  Tensor w = uniform({128}, 0.5, 1.5, gen).to(gpu).requires_grad_();
  Tensor b = uniform({128}, -1, 1, gen).to(gpu).requires_grad_();
  Tensor g = uniform({32, 256, 128}, -1, 1, gen).to(gpu);
  const int64_t norm_rows = 32 * 256;
  ember_emu::reset_counts();
  layer_norm(x, w, b).backward(g);
  c = ember_emu::counts();
  INFO(ember_emu::describe(c));
  REQUIRE(c.launches_by_kernel["layer_norm_forward_warp_kernel"] == 1);
  REQUIRE(c.launches_by_kernel["layer_norm_dx_warp_kernel"] == 1);
  CHECK(c.blocks_by_kernel["layer_norm_forward_warp_kernel"] * 16 <= norm_rows);
  CHECK(c.blocks_by_kernel["layer_norm_dx_warp_kernel"] * 16 <= norm_rows);
}

// Cross-entropy (the classifier's 2 classes) runs a warp per row too: 8 rows per block, where the
// block kernels launched one block per row.
TEST_CASE("emulator counts: cross-entropy on short rows launches a warp per row") {
  const Device gpu = Device::cuda(0);
  Generator gen(6);
  const int64_t rows = 1024;  // the recipe's 32 x 256 rows would only take longer
  Tensor logits = uniform({rows, 2}, -2, 2, gen).to(gpu).requires_grad_();
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[size_t(r)] = r % 2;
  Tensor targets = from_vector(t, {rows});
  ember_emu::reset_counts();
  cross_entropy(logits, targets).backward();
  ember_emu::Counts c = ember_emu::counts();
  INFO(ember_emu::describe(c));
  CHECK(c.launches_by_kernel.count("cross_entropy_forward_kernel") == 0);
  CHECK(c.launches_by_kernel.count("cross_entropy_backward_kernel") == 0);
  REQUIRE(c.launches_by_kernel["cross_entropy_forward_warp_kernel"] == 1);
  REQUIRE(c.launches_by_kernel["cross_entropy_backward_warp_kernel"] == 1);
  CHECK(c.blocks_by_kernel["cross_entropy_forward_warp_kernel"] * 8 <= rows);
}

// RMS norm at the recipe's width runs a warp per row: 8 rows per block.
TEST_CASE("emulator counts: rms_norm on short rows launches a warp per row") {
  const Device gpu = Device::cuda(0);
  Generator gen(7);
  const int64_t rows = 1024;
  Tensor x = uniform({rows, 128}, -2, 2, gen).to(gpu).requires_grad_();
  Tensor w = uniform({128}, 0.5, 1.5, gen).to(gpu).requires_grad_();
  ember_emu::reset_counts();
  rms_norm(x, w).backward(uniform({rows, 128}, -1, 1, gen).to(gpu));
  ember_emu::Counts c = ember_emu::counts();
  INFO(ember_emu::describe(c));
  CHECK(c.launches_by_kernel.count("rms_norm_forward_kernel") == 0);
  CHECK(c.launches_by_kernel.count("rms_norm_dx_kernel") == 0);
  REQUIRE(c.launches_by_kernel["rms_norm_forward_warp_kernel"] == 1);
  REQUIRE(c.launches_by_kernel["rms_norm_dx_warp_kernel"] == 1);
  CHECK(c.blocks_by_kernel["rms_norm_forward_warp_kernel"] * 8 <= rows);
  CHECK(c.blocks_by_kernel["rms_norm_dx_warp_kernel"] * 8 <= rows);
}
