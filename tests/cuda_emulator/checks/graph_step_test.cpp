// A training step captured once as a CUDA graph and replayed (core/cuda_graph.h), on the emulator:
// the replays give the eager steps' numbers bit for bit, each is one launch with no host wait, the
// capture makes no cudaMalloc, and the blocks the graph uses are not handed to other work.
// Built into ember_tests_emulated only (it reads the emulator's counts).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/cuda_graph.h"
#include "core/cuda_ops.h"
#include "counters.h"
#include "optim/optimizer.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda(0);

// A small model whose step needs nothing from the host: two linear layers with gelu, layer norm
// and a softmax between them, a squared error against a target already on the GPU, SGD.
struct Model {
  Tensor w1, b1, g, beta, w2, b2;
  explicit Model(uint64_t seed) {
    Generator gen(seed);
    w1 = uniform({24, 12}, -0.5, 0.5, gen).to(kGpu).requires_grad_();
    b1 = uniform({24}, -0.1, 0.1, gen).to(kGpu).requires_grad_();
    g = uniform({24}, 0.8, 1.2, gen).to(kGpu).requires_grad_();
    beta = uniform({24}, -0.1, 0.1, gen).to(kGpu).requires_grad_();
    w2 = uniform({5, 24}, -0.5, 0.5, gen).to(kGpu).requires_grad_();
    b2 = uniform({5}, -0.1, 0.1, gen).to(kGpu).requires_grad_();
  }
  std::vector<Tensor> params() const { return {w1, b1, g, beta, w2, b2}; }
  Tensor loss(const Tensor& x, const Tensor& target) const {
    Tensor h = layer_norm(gelu(linear(x, w1, b1)), g, beta);
    Tensor y = softmax(linear(h, w2, b2), -1);
    Tensor d = y - target;
    return mean(d * d);
  }
};

struct Step {
  Model& model;
  optim::SGD& sgd;
  const Tensor& x;
  const Tensor& target;
  Tensor loss;
  void operator()() {
    sgd.zero_grad();
    loss = model.loss(x, target);
    loss.backward();
    sgd.step();
  }
};

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

}  // namespace

TEST_CASE("cuda graphs: a training step captured once replays the eager steps bit for bit, one launch each") {
  Generator gen(11);
  const Tensor x = uniform({8, 12}, -1, 1, gen).to(kGpu);
  const Tensor target = uniform({8, 5}, 0, 0.4, gen).to(kGpu);

  // Eager: four steps.
  Model eager(5);
  optim::SGD eager_sgd({{eager.params(), 0.0}}, 0.5);
  Step eager_step{eager, eager_sgd, x, target, {}};
  std::vector<std::vector<float>> eager_losses;
  for (int s = 0; s < 4; ++s) {
    eager_step();
    eager_losses.push_back(host(eager_step.loss));
  }

  // The same model: one eager step (the warm-up: the allocator caches the step's blocks), the step
  // captured (nothing runs), then three replays.
  Model graphed(5);
  optim::SGD graphed_sgd({{graphed.params(), 0.0}}, 0.5);
  Step step{graphed, graphed_sgd, x, target, {}};
  step();
  CHECK(host(step.loss) == eager_losses[0]);
  const std::vector<float> before = host(graphed.w1);
  const int64_t mallocs = cuda::cudamalloc_count(0);
  CudaGraph graph;
  graph.capture(kGpu, [&] { step(); });
  CHECK(cuda::cudamalloc_count(0) == mallocs);  // no cudaMalloc in the capture
  CHECK(host(graphed.w1) == before);            // captured, not run
  const Tensor loss = step.loss;                // rewritten in place by every replay

  // Tensors made after the capture must not share the graph's blocks: a replay leaves them alone.
  std::vector<Tensor> bystanders;
  for (int copy = 0; copy < 4; ++copy)
    for (int64_t n : {1, 5, 8, 12, 24, 40, 96, 120, 192, 288})
      bystanders.push_back(full({n}, 7.0, Dtype::Float32, kGpu));

  for (int s = 1; s < 4; ++s) {
    ember_emu::reset_counts();
    graph.replay();
    const ember_emu::Counts c = ember_emu::counts();
    INFO(ember_emu::describe(c));
    CHECK(c.kernel_launches == 1);
    CHECK(c.graph_launches == 1);
    CHECK(c.library_calls == 0);
    CHECK(c.host_waits.empty());
    CHECK(c.pageable_copies == 0);
    CHECK(host(loss) == eager_losses[size_t(s)]);
  }
  CHECK(host(graphed.w1) == host(eager.w1));
  CHECK(host(graphed.b2) == host(eager.b2));
  CHECK(host(graphed.w2.grad()) == host(eager.w2.grad()));
  for (const Tensor& b : bystanders) CHECK(host(b) == std::vector<float>(size_t(b.numel()), 7.0f));
}

TEST_CASE("cuda graphs: a capture that would need cudaMalloc, or that waits, or uploads, fails clearly and keeps nothing") {
  Generator gen(12);
  const Tensor x = uniform({8, 12}, -1, 1, gen).to(kGpu);
  const Tensor target = uniform({8, 5}, 0, 0.4, gen).to(kGpu);
  Model model(6);
  (void)model.loss(x, target).item<float>();  // warm-up of the forward's blocks
  CudaGraph graph;
  cuda_allocator(0).release_cached();  // so that the next allocation of a new size needs cudaMalloc...
  (void)model.loss(x, target).item<float>();  // ... but the forward's blocks are cached again
  auto fresh = [&] {
    Tensor big = mul_scalar(full({1 << 22}, 1.0, Dtype::Float32, kGpu), 2.0);  // 16 MiB: not cached
    (void)big;
  };
  std::string message;
  try {
    graph.capture(kGpu, fresh);
  } catch (const std::exception& e) {
    message = e.what();
  }
  CHECK(message.find("cudaMalloc is not allowed while a stream captures") != std::string::npos);
  CHECK(message.find("warm-up") != std::string::npos);
  CHECK_FALSE(graph.captured());

  // A read of a GPU value inside the capture (a host wait) ends it with the GPU's error.
  message.clear();
  try {
    graph.capture(kGpu, [&] { (void)model.loss(x, target).item<float>(); });
  } catch (const std::exception& e) {
    message = e.what();
  }
  CHECK(message.find("capturing") != std::string::npos);
  CHECK_FALSE(graph.captured());

  // A copy from the host inside the capture: refused before it is recorded.
  message.clear();
  try {
    graph.capture(kGpu, [&] { (void)from_vector(std::vector<float>{1, 2, 3}, {3}).to(kGpu); });
  } catch (const std::exception& e) {
    message = e.what();
  }
  CHECK(message.find("a host-to-device copy inside the capture") != std::string::npos);
  CHECK_FALSE(graph.captured());

  // Afterwards the device works as before: an eager step, then a capture of it.
  optim::SGD sgd({{model.params(), 0.0}}, 0.5);
  Step step{model, sgd, x, target, {}};
  step();
  graph.capture(kGpu, [&] { step(); });
  CHECK(graph.captured());
  graph.replay();
  CHECK(std::isfinite(step.loss.item<float>()));
}
