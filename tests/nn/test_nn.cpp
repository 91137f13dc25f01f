// nn/: every module's output on small known inputs, gradchecks in float64, and errors.
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {
// Sets a parameter's values (outside autograd).
void set(Tensor& p, std::initializer_list<double> values) {
  NoGradGuard no_grad;
  p.copy_(tensor(values, p.shape(), p.dtype()));
}
}  // namespace

TEST_CASE("nn: Module registers parameters recursively by name") {
  Generator gen(0);
  nn::TransformerEncoderLayer layer(8, 2, 16, 0.0, gen);
  auto named = layer.named_parameters();
  std::vector<std::string> names;
  for (auto& [name, p] : named) names.push_back(name);
  CHECK(names == std::vector<std::string>{"ln1.weight", "ln1.bias", "attention.qkv.weight", "attention.qkv.bias",
                                          "attention.proj.weight", "attention.proj.bias", "ln2.weight", "ln2.bias",
                                          "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(layer.num_parameters() == 2 * 8 + (8 * 24 + 24) + (8 * 8 + 8) + 2 * 8 + (8 * 16 + 16) + (16 * 8 + 8));
  for (auto& p : layer.parameters()) CHECK(p.requires_grad());
  layer.eval();
  CHECK_FALSE(layer.drop1->is_training());
  layer.train();
  CHECK(layer.attention->is_training());
}

TEST_CASE("nn: initialisation follows the recipe") {
  Generator gen(3);
  nn::Linear big(256, 512, gen);
  double std = std::sqrt(var(big.weight).item<float>());
  CHECK(std::abs(std - 0.02) < 0.001);
  CHECK(std::abs(mean(big.weight).item<float>()) < 0.001);
  check_values(big.bias, std::vector<double>(512, 0.0));
  nn::LayerNorm ln(4);
  check_values(ln.weight, {1, 1, 1, 1});
  check_values(ln.bias, {0, 0, 0, 0});
}

TEST_CASE("nn: Linear, Embedding, LayerNorm, GELU, Dropout on known inputs") {
  Generator gen(0);
  nn::Linear linear(3, 2, gen);
  set(linear.weight, {1, 2, 3, -1, 0, 1});
  set(linear.bias, {0.5, -0.5});
  check_values(linear.forward(tensor({1, 1, 1, 2, 0, -1}, {2, 3})), {6.5, -0.5, -0.5, -3.5});
  check_values(linear.forward(tensor({1, 1, 1}, {1, 1, 3})), {6.5, -0.5});
  check_error([&] { linear.forward(zeros({2, 4})); }, "does not end in in_features 3");

  nn::Embedding emb(4, 2, gen);
  set(emb.weight, {0, 1, 10, 11, 20, 21, 30, 31});
  check_values(emb.forward(from_vector(std::vector<int64_t>{3, 0, 3}, {1, 3})), {30, 31, 0, 1, 30, 31});

  nn::LayerNorm ln(2);
  set(ln.weight, {2, 1});
  set(ln.bias, {0, 1});
  // [1, 3]: mean 2, var 1 -> [-1, 1] (up to eps) -> [-2, 2]
  check_values(ln.forward(tensor({1, 3})), {-2 / std::sqrt(1 + 1e-5), 1 + 1 / std::sqrt(1 + 1e-5)});

  nn::GELU act;
  check_values(act.forward(tensor({1.0})), {0.8413447461});

  nn::Dropout drop(0.5, gen);
  Tensor x = ones({10000});
  Tensor y = drop.forward(x);
  double kept = mean(gt(y, scalar(0)).to(Dtype::Float32)).item<float>();
  CHECK(std::abs(kept - 0.5) < 0.03);
  CHECK(max(y).item<float>() == doctest::Approx(2.0));
  drop.eval();
  check_close(drop.forward(x), x);
}

// Attention written head by head with explicit slices: the reference the fused-QKV module must match.
Tensor reference_attention(const nn::MultiHeadAttention& mha, const Tensor& x, const Tensor& pad, bool causal) {
  int64_t B = x.size(0), T = x.size(1), D = mha.embed_dim, H = mha.heads, Dh = D / H;
  Tensor qkv = mha.qkv->forward(x);
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    Tensor q = qkv.narrow(2, h * Dh, Dh), k = qkv.narrow(2, D + h * Dh, Dh), v = qkv.narrow(2, 2 * D + h * Dh, Dh);
    Tensor scores = matmul(q, k.transpose(1, 2)) / std::sqrt(double(Dh));  // [B, T, T]
    Tensor blocked = pad.defined() ? pad.view({B, 1, T}).expand({B, T, T}) : zeros({B, T, T}, Dtype::Bool);
    if (causal) blocked = where(gt(arange(T).view({1, T}), arange(T).view({T, 1})), ones({1}, Dtype::Bool), blocked);
    scores = where(blocked, full({1}, -1e30, x.dtype()), scores);
    heads.push_back(matmul(softmax(scores, -1), v));
  }
  return mha.proj->forward(cat(heads, 2));
}

TEST_CASE("nn: MultiHeadAttention matches a head-by-head reference, masks padded and future keys") {
  Generator gen(5);
  for (int64_t heads : {1, 2, 4}) {
    nn::MultiHeadAttention mha(8, heads, gen);
    Tensor x = randn({2, 5, 8}, gen);
    Tensor pad = zeros({2, 5}, Dtype::Bool);
    pad.data<bool>()[3] = pad.data<bool>()[4] = true;  // review 0 has 3 real tokens
    for (bool causal : {false, true}) {
      auto out = mha.forward(x, pad, causal, /*need_weights=*/true);
      check_close(out.out, reference_attention(mha, x, pad, causal), 1e-4);
      CHECK(out.weights.shape() == Shape{2, heads, 5, 5});
      // No attention on padded keys of review 0; rows sum to 1.
      check_values(sum(out.weights.select(0, 0).narrow(2, 3, 2)), {0.0});
      check_close(sum(out.weights, {3}), ones({2, heads, 5}), 1e-5);
      if (causal) check_values(sum(out.weights.select(2, 0).narrow(2, 1, 4)), {0.0});
    }
  }
  check_error([&] { nn::MultiHeadAttention(10, 3, gen); }, "embed_dim 10 is not divisible by heads 3");
  nn::MultiHeadAttention mha(8, 2, gen);
  check_error([&] { mha.forward(zeros({2, 5, 6})); }, "is not [B, T, 8]");
  check_error([&] { mha.forward(zeros({2, 5, 8}), zeros({2, 4}, Dtype::Bool)); }, "key_padding_mask must be bool [2, 5]");
}

TEST_CASE("gradcheck: Linear, LayerNorm, MultiHeadAttention, encoder layer and classifier") {
  Generator gen(11);
  auto check_module = [&](nn::Module& m, const std::function<Tensor()>& forward) {
    m.to(Dtype::Float64);
    // Every parameter is checked: gradcheck perturbs the parameters themselves.
    std::vector<Tensor> params = m.parameters();
    check_gradient([&](const std::vector<Tensor>&) { return forward(); }, params);
  };
  {
    nn::Linear linear(3, 4, gen);
    Tensor x = random64({2, 3}, 1);
    check_module(linear, [&] { return linear.forward(x); });
  }
  {
    nn::LayerNorm ln(5);
    Tensor x = random64({3, 5}, 2);
    { NoGradGuard g; ln.weight.copy_(random64({5}, 3)); }
    check_module(ln, [&] { return ln.forward(x); });
  }
  {
    nn::MultiHeadAttention mha(4, 2, gen);
    mha.to(Dtype::Float64);
    { NoGradGuard g; for (auto& p : mha.parameters()) p.copy_(random64(p.shape(), 4) * 0.5); }
    Tensor x = random64({2, 3, 4}, 5);
    Tensor pad = zeros({2, 3}, Dtype::Bool);
    pad.data<bool>()[2] = true;
    check_module(mha, [&] { return mha.forward(x, pad).out; });
    check_module(mha, [&] { return mha.forward(x, Tensor(), /*causal=*/true).out; });
  }
  {
    nn::TransformerEncoderLayer layer(4, 2, 6, 0.0, gen);
    Tensor x = random64({1, 3, 4}, 6);
    check_module(layer, [&] { return layer.forward(x, zeros({1, 3}, Dtype::Bool)); });
  }
  {
    nn::ClassifierConfig config{12, 6, 4, 2, 1, 8, 2, 0.0};
    nn::TransformerClassifier model(config, gen);
    Tensor tokens = from_vector(std::vector<int64_t>{3, 5, 7, 0, 2, 2, 9, 11}, {2, 4});
    Tensor pad = eq(tokens, zeros({1}, Dtype::Int64));
    Tensor labels = from_vector(std::vector<int64_t>{1, 0});
    check_module(model, [&] { return cross_entropy(model.forward(tokens, pad), labels); });
  }
}

TEST_CASE("nn: the classifier ignores padding: padded and unpadded batches agree") {
  Generator gen(2);
  nn::ClassifierConfig config{20, 8, 8, 2, 2, 16, 2, 0.1};
  nn::TransformerClassifier model(config, gen);
  model.eval();
  Tensor short_review = from_vector(std::vector<int64_t>{4, 5, 6}, {1, 3});
  Tensor padded = from_vector(std::vector<int64_t>{4, 5, 6, 0, 0}, {1, 5});
  Tensor logits_short = model.forward(short_review, zeros({1, 3}, Dtype::Bool));
  Tensor logits_padded = model.forward(padded, eq(padded, zeros({1}, Dtype::Int64)));
  check_close(logits_short, logits_padded, 1e-5);
  CHECK(model.num_parameters() == 20 * 8 + 8 * 8 + 2 * (2 * 8 + 8 * 24 + 24 + 8 * 8 + 8 + 2 * 8 + 8 * 16 + 16 + 16 * 8 + 8) +
                                      2 * 8 + 8 * 2 + 2);
}
