// The seeds' two MultiHeadAttention classes (examples/seed_attention.h), written in Ember line for line, next
// to nn::MultiHeadAttention with the same weights: their outputs and gradients agree; then the seed's
// train_step, with its memory print, on a small classifier built around the seed's class.
// Usage: seed_attention [--device cpu|cuda] [--steps N]   (defaults: cpu, 20 steps). Exits 1 if they disagree.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/device.h"
#include "examples/seed_attention.h"
#include "nn/attention.h"
#include "optim/optimizer.h"

using namespace ember;

namespace {

// The largest |a - b| over two tensors of one shape.
double max_difference(const Tensor& a, const Tensor& b) {
  return max(abs(a.detach().to(Device::cpu()) - b.detach().to(Device::cpu()))).item<double>();
}

// nn::MultiHeadAttention's packed projection holds [W_q; W_k; W_v] (PyTorch's in_proj_weight).
void copy_weights(const seeds::ViewMultiHeadAttention& seed, nn::MultiHeadAttention& mha) {
  NoGradGuard no_grad;
  mha.qkv->weight.copy_(cat({seed.W_q->weight, seed.W_k->weight, seed.W_v->weight}, 0));
  mha.qkv->bias.copy_(cat({seed.W_q->bias, seed.W_k->bias, seed.W_v->bias}, 0));
  mha.proj->weight.copy_(seed.W_o->weight);
  mha.proj->bias.copy_(seed.W_o->bias);
}

void copy_weights(const seeds::EinopsMultiHeadAttention& seed, nn::MultiHeadAttention& mha) {
  NoGradGuard no_grad;
  mha.qkv->weight.copy_(seed.qkv_proj->weight);
  mha.qkv->bias.copy_(seed.qkv_proj->bias);
  mha.proj->weight.copy_(seed.out_proj->weight);
  mha.proj->bias.copy_(seed.out_proj->bias);
}

// The largest gradient difference: of the inputs, and of the seed's parameters against the module's (the packed
// projection's gradient against the seed's pieces, stacked as copy_weights stacks the weights).
double gradient_difference(const seeds::ViewMultiHeadAttention& seed, const nn::MultiHeadAttention& mha,
                           const std::vector<Tensor>& in_a, const std::vector<Tensor>& in_b) {
  double worst = 0;
  for (size_t i = 0; i < in_a.size(); ++i) worst = std::max(worst, max_difference(in_a[i].grad(), in_b[i].grad()));
  worst = std::max(worst, max_difference(cat({seed.W_q->weight.grad(), seed.W_k->weight.grad(), seed.W_v->weight.grad()}, 0),
                                         mha.qkv->weight.grad()));
  worst = std::max(worst, max_difference(cat({seed.W_q->bias.grad(), seed.W_k->bias.grad(), seed.W_v->bias.grad()}, 0),
                                         mha.qkv->bias.grad()));
  worst = std::max(worst, max_difference(seed.W_o->weight.grad(), mha.proj->weight.grad()));
  return std::max(worst, max_difference(seed.W_o->bias.grad(), mha.proj->bias.grad()));
}

double gradient_difference(const seeds::EinopsMultiHeadAttention& seed, const nn::MultiHeadAttention& mha,
                           const std::vector<Tensor>& in_a, const std::vector<Tensor>& in_b) {
  double worst = 0;
  for (size_t i = 0; i < in_a.size(); ++i) worst = std::max(worst, max_difference(in_a[i].grad(), in_b[i].grad()));
  worst = std::max(worst, max_difference(seed.qkv_proj->weight.grad(), mha.qkv->weight.grad()));
  worst = std::max(worst, max_difference(seed.qkv_proj->bias.grad(), mha.qkv->bias.grad()));
  worst = std::max(worst, max_difference(seed.out_proj->weight.grad(), mha.proj->weight.grad()));
  return std::max(worst, max_difference(seed.out_proj->bias.grad(), mha.proj->bias.grad()));
}

// The seed's train_step's model: tokens -> embedding -> the seed's attention -> mean over tokens -> 2 classes.
struct SeedClassifier : nn::Module {
  SeedClassifier(int64_t vocab, int64_t dim, int64_t heads, Generator& gen) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab, dim, gen));
    attention = register_module("attention", std::make_shared<seeds::ViewMultiHeadAttention>(dim, heads, gen));
    head = register_module("head", std::make_shared<nn::Linear>(dim, 2, gen));
  }
  std::pair<Tensor, Tensor> forward(const Tensor& tokens) const {
    Tensor x = embedding->forward(tokens);
    auto [out, weights] = attention->forward(x, x, x);
    return {head->forward(mean(out, {1})), weights};
  }
  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<seeds::ViewMultiHeadAttention> attention;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace

int main(int argc, char** argv) {
  Device device = Device::cpu();
  int64_t steps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device = std::strcmp(argv[++i], "cuda") == 0 ? Device::cuda(0) : Device::cpu();
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: seed_attention [--device cpu|cuda] [--steps N]\n");
      return 2;
    }
  }
  if (device.is_cuda() && cuda_device_count() == 0) {
    std::fprintf(stderr, "seed_attention: no CUDA device\n");
    return 2;
  }
  Generator gen(0);
  bool agree = true;
  // 1. The classes against the module, in float64: outputs and every gradient.
  std::printf("seed class            heads  T  S  mask   max |out diff|  max |grad diff|\n");
  for (int64_t heads : {1, 4, 8}) {
    for (bool masked : {false, true}) {
      const int64_t B = 2, T = 5, S = 7, D = 16;
      // The seeds' mask: 0 where a key is hidden (here review 1's last two keys), 1 elsewhere, [B, 1, 1, keys].
      const auto seed_mask = [&](int64_t keys) {
        Tensor m = ones({B, 1, 1, keys}, Dtype::Int64);
        if (masked) m.narrow(0, 1, 1).narrow(3, keys - 2, 2).fill_(0);
        return m.to(device);
      };
      {  // seed 001: cross-attention, keys and values from another sequence (T != S)
        seeds::ViewMultiHeadAttention seed(D, heads, gen);
        nn::MultiHeadAttention mha(D, heads, gen);
        seed.to(Dtype::Float64), mha.to(Dtype::Float64), seed.to(device), mha.to(device);
        copy_weights(seed, mha);
        Tensor q = randn({B, T, D}, gen, Dtype::Float64).to(device), kv = randn({B, S, D}, gen, Dtype::Float64).to(device);
        Tensor q1 = q.clone().requires_grad_(), kv1 = kv.clone().requires_grad_();
        Tensor q2 = q.clone().requires_grad_(), kv2 = kv.clone().requires_grad_();
        auto [seed_out, seed_weights] = seed.forward(q1, kv1, kv1, masked ? seed_mask(S) : Tensor());
        nn::AttentionMasks masks;
        if (masked) masks.attn_mask = seed_mask(S) != 0;
        nn::MultiHeadAttention::Output ours = mha.forward(q2, kv2, kv2, masks, /*need_weights=*/true);
        sum(seed_out * seed_out).backward();
        sum(ours.out * ours.out).backward();
        const double out_diff = std::max(max_difference(seed_out, ours.out), max_difference(seed_weights, ours.weights));
        const double grad_diff = gradient_difference(seed, mha, {q1, kv1}, {q2, kv2});
        std::printf("001 (view, W_q W_k W_v) %3lld  %lld  %lld  %-5s  %14.2e  %15.2e\n", (long long)heads, (long long)T,
                    (long long)S, masked ? "yes" : "no", out_diff, grad_diff);
        // Seed 001 divides by torch.sqrt(torch.tensor(d_k, dtype=torch.float32)): a float32 square root, which
        // rounds where sqrt(d_k) is not a float (d_k = 2 here at 8 heads), 3e-8 of the scores at most.
        const float root = std::sqrt(float(D / heads));
        const double tolerance = double(root) * double(root) == double(D / heads) ? 1e-12 : 1e-9;
        agree = agree && out_diff < tolerance && grad_diff < 10 * tolerance;
      }
      {  // seed 000: self-attention with einops
        seeds::EinopsMultiHeadAttention seed(D, heads, gen);
        nn::MultiHeadAttention mha(D, heads, gen);
        seed.to(Dtype::Float64), mha.to(Dtype::Float64), seed.to(device), mha.to(device);
        copy_weights(seed, mha);
        Tensor x = randn({B, T, D}, gen, Dtype::Float64).to(device);
        Tensor x1 = x.clone().requires_grad_(), x2 = x.clone().requires_grad_();
        auto [seed_out, seed_weights] = seed.forward(x1, masked ? seed_mask(T) : Tensor());
        nn::AttentionMasks masks;
        if (masked) masks.attn_mask = seed_mask(T) != 0;
        nn::MultiHeadAttention::Output ours = mha.forward(x2, x2, x2, masks, /*need_weights=*/true);
        sum(seed_out * seed_out).backward();
        sum(ours.out * ours.out).backward();
        const double out_diff = std::max(max_difference(seed_out, ours.out), max_difference(seed_weights, ours.weights));
        const double grad_diff = gradient_difference(seed, mha, {x1}, {x2});
        std::printf("000 (einops, qkv_proj)  %3lld  %lld  %lld  %-5s  %14.2e  %15.2e\n", (long long)heads, (long long)T,
                    (long long)T, masked ? "yes" : "no", out_diff, grad_diff);
        agree = agree && out_diff < 1e-12 && grad_diff < 1e-11;
      }
    }
  }

  // 2. The seed's train_step, with its memory print.
  SeedClassifier model(100, 64, 4, gen);
  model.to(device);
  optim::Adam optimizer({{model.parameters(), 0.0}}, 1e-3);
  const auto train_step = [&](const Tensor& inputs_host, const Tensor& labels_host) {
    // inputs = inputs.to(device); labels = labels.to(device)
    Tensor inputs = inputs_host.to(device), labels = labels_host.to(device);
    // Clear previous gradients
    optimizer.zero_grad();
    // Forward pass
    auto [outputs, attn_weights] = model.forward(inputs);
    // Compute loss
    Tensor loss = cross_entropy(outputs, labels);
    // Backward pass
    loss.backward();
    // Update weights
    optimizer.step();
    // Print memory usage (the seed: torch.cuda.memory_allocated() / 1024 ** 2)
    std::printf("%s memory allocated: %.2f MB (peak %.2f MB)\n", device.str().c_str(),
                double(memory_stats(device).allocated) / (1024.0 * 1024.0),
                double(memory_stats(device).peak_allocated) / (1024.0 * 1024.0));
    return loss.item<float>();
  };
  float first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    // A task the model can learn: the label says whether token 7 occurs.
    Tensor tokens = (rand({16, 32}, gen) * 100.0).to(Dtype::Int64);
    Tensor labels = (sum((tokens == 7).to(Dtype::Float32), {1}) > 0).to(Dtype::Int64);
    last = train_step(tokens, labels);
    if (step == 0) first = last;
  }
  std::printf("loss %.3f -> %.3f over %lld steps; the seeds' classes %s nn::MultiHeadAttention\n", first, last,
              (long long)steps, agree ? "agree with" : "DISAGREE with");
  return agree ? 0 : 1;
}
