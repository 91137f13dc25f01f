// Activation checkpointing (autograd/checkpoint.h): gradients bit-identical to the plain run's, with
// dropout (the same masks), nested, under no-grad; the memory it saves; errors that name the problem.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/node.h"
#include "autograd/recompute_cache.h"
#include "core/allocator.h"
#include "core/cuda_ops.h"
#include "core/precision.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// Bitwise equality of two float tensors' values.
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// A classifier with dropout; the gradients of all its parameters after one step on fixed tokens.
struct Step {
  float loss;
  std::map<std::string, Tensor> grads;
  uint64_t generator_offset;
  int64_t kept_taken;  // attention results a recompute took from its forward (autograd/recompute_cache.h)
};

// precision: the forward's mixed-precision scope; backward runs outside it (the ops, and the checkpoint's
// recompute, remember theirs).
Step train_step(bool checkpointed, int64_t T, int64_t window = -1, Precision precision = Precision::Float32) {
  Generator gen(11);
  nn::ClassifierConfig config{50, 64, 16, 2, 2, 32, 2, 0.2};
  config.checkpoint = checkpointed;
  config.attention_window = window;
  config.attention_global = window >= 0 ? 1 : 0;
  nn::TransformerClassifier model(config, gen);
  Generator data(5);
  Tensor tokens = uniform({3, T}, 1, 49, data).to(Dtype::Int64);
  Tensor mask = zeros({3, T}, Dtype::Bool);
  for (int64_t t = T - 2; t < T; ++t) mask.data<bool>()[T + t] = true;  // review 1 padded at the end
  Tensor loss;
  const int64_t taken_before = kept_results_taken();
  {
    MixedPrecisionGuard scope(precision);
    loss = cross_entropy(model.forward(tokens, mask), from_vector(std::vector<int64_t>{0, 1, 1}, {3}));
  }
  loss.backward();
  Step step{loss.item<float>(), {}, gen.offset(), kept_results_taken() - taken_before};
  for (auto& [name, p] : model.named_parameters()) step.grads[name] = p.grad();
  return step;
}

}  // namespace

TEST_CASE("activation checkpoint: a classifier's gradients are bit-identical to the plain run's, dropout on") {
  for (auto [window, precision] : {std::pair{int64_t{-1}, Precision::Float32}, {int64_t{3}, Precision::Float32},
                                   {int64_t{-1}, Precision::BFloat16}, {int64_t{3}, Precision::BFloat16}}) {
    CAPTURE(window);
    CAPTURE(precision_name(precision));
    Step plain = train_step(false, 12, window, precision), checkpointed = train_step(true, 12, window, precision);
    CHECK(plain.loss == checkpointed.loss);
    // The recompute replays the dropout draws and puts the generator back: the next draws are the same.
    CHECK(plain.generator_offset == checkpointed.generator_offset);
    // Each block's recompute took its attention's output from the forward instead of computing it again.
    CHECK(plain.kept_taken == 0);
    CHECK(checkpointed.kept_taken == 2);
    REQUIRE(plain.grads.size() == checkpointed.grads.size());
    for (auto& [name, g] : plain.grads) {
      CAPTURE(name);
      REQUIRE(g.defined());
      REQUIRE(checkpointed.grads.at(name).defined());
      CHECK(same_bits(g, checkpointed.grads.at(name)));
    }
  }
}

TEST_CASE("activation checkpoint: dropout in the function draws the same mask in the recompute") {
  Generator gen(3);
  Tensor w = uniform({6, 6}, -1, 1, gen).requires_grad_();
  auto fn = [&](const std::vector<Tensor>& in) { return dropout(gelu(matmul(in[0], w)), 0.5, true, gen); };
  Tensor x = uniform({4, 6}, -1, 1, gen).requires_grad_();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  Tensor plain = fn({x});
  sum(plain * plain).backward();
  Tensor gx = x.grad(), gw = w.grad();
  x.zero_grad();
  w.zero_grad();
  gen.set_state(seed, offset);
  Tensor out = checkpoint(fn, {x}, {&gen});
  CHECK(same_bits(out, plain));
  CHECK(out.grad_fn()->name == "checkpoint");
  const uint64_t after_forward = gen.offset();
  sum(out * out).backward();
  CHECK(gen.offset() == after_forward);  // the recompute's draws are not taken from the stream again
  CHECK(same_bits(x.grad(), gx));
  CHECK(same_bits(w.grad(), gw));
  // Not replaying the generator gives another mask, so other gradients: the replay is what makes them equal.
  x.zero_grad();
  w.zero_grad();
  gen.set_state(seed, offset);
  Tensor unreplayed = checkpoint(fn, {x}, {});
  sum(unreplayed * unreplayed).backward();
  CHECK_FALSE(same_bits(x.grad(), gx));
}

TEST_CASE("activation checkpoint: nested checkpoints and several inputs give the plain gradients") {
  Generator gen(4);
  Tensor w = uniform({5, 5}, -1, 1, gen, Dtype::Float64).requires_grad_();
  auto inner = [&](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w)) * in[1]; };
  auto outer = [&](const std::vector<Tensor>& in) {
    Tensor h = checkpoint(inner, {in[0], in[1]});
    return exp(checkpoint(inner, {h, in[1]}) * 0.5);
  };
  Tensor a = uniform({3, 5}, -1, 1, gen, Dtype::Float64).requires_grad_();
  Tensor b = uniform({3, 5}, -1, 1, gen, Dtype::Float64).requires_grad_();
  Tensor plain = exp(inner({inner({a, b}), b}) * 0.5);
  sum(plain).backward();
  Tensor ga = a.grad(), gb = b.grad(), gw = w.grad();
  a.zero_grad();
  b.zero_grad();
  w.zero_grad();
  Tensor nested = checkpoint(outer, {a, b});
  check_close(nested, plain, 0);
  sum(nested).backward();
  check_close(a.grad(), ga, 0);
  check_close(b.grad(), gb, 0);
  check_close(w.grad(), gw, 0);
  // And through finite differences (float64).
  check_gradient([&](const std::vector<Tensor>& in) { return checkpoint(outer, in); },
                 {random64({3, 5}, 1), random64({3, 5}, 2)});
}

TEST_CASE("activation checkpoint: under no-grad, or with no input needing grad, the function just runs") {
  Tensor x = random64({3, 4}, 7).requires_grad_();
  int calls = 0;
  auto fn = [&](const std::vector<Tensor>& in) {
    ++calls;
    return exp(in[0]);
  };
  {
    NoGradGuard no_grad;
    Tensor out = checkpoint(fn, {x});
    CHECK_FALSE(out.requires_grad());
    check_close(out, exp(x.detach()), 0);
  }
  Tensor out = checkpoint(fn, {x.detach()});
  CHECK_FALSE(out.requires_grad());
  CHECK(calls == 2);
  // With grad: one call forward, one more in backward.
  out = checkpoint(fn, {x});
  CHECK(calls == 3);
  sum(out).backward();
  CHECK(calls == 4);
  check_close(x.grad(), exp(x.detach()), 0);
}

TEST_CASE("activation checkpoint: bad use is a clear error") {
  Tensor x = random64({2, 3}, 8).requires_grad_();
  check_error([&] { checkpoint(nullptr, {x}); }, "checkpoint: no function given");
  check_error([&] { checkpoint([](const std::vector<Tensor>&) { return Tensor(); }, {x}); },
              "checkpoint: the function returned an undefined tensor (forward)");
  check_error([&] { checkpoint([](const std::vector<Tensor>& in) { return in[0]; }, {x}, {nullptr}); },
              "checkpoint: generator 0 is null");
  // An input changed in place between the forward and the backward.
  Tensor y = random64({2, 3}, 9).requires_grad_();
  Tensor h = y * 2.0;
  Tensor out = checkpoint([](const std::vector<Tensor>& in) { return exp(in[0]); }, {h});
  {
    NoGradGuard no_grad;
    h.add_(scalar(1.0, Dtype::Float64));
  }
  check_error([&] { sum(out).backward(); }, "backward of checkpoint");
  // A function that computes something else the second time.
  int calls = 0;
  Tensor odd = checkpoint([&](const std::vector<Tensor>& in) { return ++calls == 1 ? in[0] * 2.0 : sum(in[0]); }, {x});
  check_error([&] { sum(odd).backward(); }, "the recompute in backward returned float64 []");
}

TEST_CASE("activation checkpoint: a classifier step keeps less memory at its peak") {
  // Peak tensor bytes of a training step at T = 256 with and without checkpointing each block.
  auto peak_of = [](bool checkpointed) {
    Generator gen(2);
    nn::ClassifierConfig config{100, 256, 32, 2, 4, 128, 2, 0.1};
    config.checkpoint = checkpointed;
    nn::TransformerClassifier model(config, gen);
    Generator data(5);
    Tensor tokens = uniform({4, 256}, 1, 99, data).to(Dtype::Int64);
    allocator_for(Device::cpu()).release_cached();
    const int64_t before = memory_stats().allocated;
    reset_peak_memory();
    Tensor loss = cross_entropy(model.forward(tokens, Tensor()), from_vector(std::vector<int64_t>{0, 1, 1, 0}, {4}));
    loss.backward();
    return memory_stats().peak_allocated - before;
  };
  const int64_t plain = peak_of(false), checkpointed = peak_of(true);
  CAPTURE(plain);
  CAPTURE(checkpointed);
  CHECK(double(checkpointed) < 0.6 * double(plain));
}

DEVICE_TEST_CASE("activation checkpoint: the recompute takes attention's kept results; nested, twice, mismatched") {
  // fn: a projection, then attention (fused, or the window kernel; on a GPU the fused kernels), in
  // float64. Its gradients through a checkpoint, nested checkpoints and a second backward equal the plain
  // run's, bit for bit, while the recompute takes the output the forward kept (autograd/recompute_cache.h).
  testing::AttentionKernels fused(true);  // the CPU has one attention: this chooses the GPU's
  Generator gen(21);
  Tensor w = uniform({6, 18}, -1, 1, gen, Dtype::Float64).to(device).requires_grad_();
  Tensor mask_host = zeros({2, 7}, Dtype::Bool);
  mask_host.data<bool>()[7 + 6] = true;
  Tensor mask = mask_host.to(device);
  for (int64_t window : {int64_t{-1}, int64_t{2}}) {
    CAPTURE(window);
    auto fn = [&](const std::vector<Tensor>& in) {
      Tensor qkv = matmul(in[0], w);
      return window < 0 ? attention(qkv, 2, mask, false) : window_attention(qkv, 2, window, 1, mask, false);
    };
    auto nested = [&](const std::vector<Tensor>& in) { return tanh(checkpoint(fn, {in[0] * 2.0})); };
    auto plain_nested = [&](const std::vector<Tensor>& in) { return tanh(fn({in[0] * 2.0})); };
    Tensor x = uniform({2, 7, 6}, -1, 1, gen, Dtype::Float64).to(device).requires_grad_();
    auto grads_of = [&](Tensor out, int backwards) {
      x.zero_grad();
      w.zero_grad();
      for (int i = 0; i < backwards; ++i) sum(out * out).backward(Tensor(), /*retain_graph=*/i + 1 < backwards);
      return std::pair{x.grad(), w.grad()};
    };
    auto plain = grads_of(fn({x}), 1);
    int64_t before = kept_results_taken();
    auto once = grads_of(checkpoint(fn, {x}), 1);
    CHECK(kept_results_taken() - before == 1);
    check_close(once.first, plain.first, 0);
    check_close(once.second, plain.second, 0);
    // Backward twice (retain_graph): the second recompute finds nothing kept, computes, and agrees.
    before = kept_results_taken();
    auto twice = grads_of(checkpoint(fn, {x}), 2);
    CHECK(kept_results_taken() - before == 1);
    check_close(twice.first, plain.first * 2.0, 0);
    check_close(twice.second, plain.second * 2.0, 0);
    // Nested: the outer recompute takes the outer forward's result (in the inner checkpoint's no-grad
    // forward, which keeps it again), and the inner recompute takes that.
    auto plain2 = grads_of(plain_nested({x}), 1);
    before = kept_results_taken();
    auto inside = grads_of(checkpoint(nested, {x}), 1);
    CHECK(kept_results_taken() - before == 2);
    check_close(inside.first, plain2.first, 0);
    check_close(inside.second, plain2.second, 0);
  }
  // A recompute that calls another attention than the forward did is an error that names both.
  int calls = 0;
  Tensor x = uniform({2, 7, 6}, -1, 1, gen, Dtype::Float64).to(device).requires_grad_();
  Tensor odd = checkpoint([&](const std::vector<Tensor>& in) {
    Tensor qkv = matmul(in[0], w);
    return ++calls == 1 ? attention(qkv, 2, Tensor(), false) : window_attention(qkv, 2, 1, 0, Tensor(), false);
  }, {x});
  check_error([&] { sum(odd).backward(); },
              "checkpoint: the recompute called window_attention where the forward called attention");
  // One of another shape (here another batch of the same width) is an error too.
  calls = 0;
  Tensor other = checkpoint([&](const std::vector<Tensor>& in) {
    Tensor qkv = matmul(++calls == 1 ? in[0] : in[0].narrow(0, 0, 1), w);
    return sum(attention(qkv, 2, Tensor(), false));
  }, {x});
  check_error([&] { other.backward(); },
              "checkpoint: the recompute's attention makes float64 [1, 7, 6], but its forward kept float64 [2, 7, 6]");
}
