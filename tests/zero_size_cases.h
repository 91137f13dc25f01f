// The zero-size sweep: every op of autograd/ops.h on inputs with a zero-size dim (0 rows, 0 features,
// 0 batch, 0 keys, empty reductions), forward and backward, as one table run on each device
// (tests/core/test_zero_size.cpp on the CPU, tests/cuda/test_cuda_edges.cpp on a GPU or the emulator).
//
// Each row gives a result of the expected shape, with PyTorch's values where they are defined (a sum
// of nothing is 0, a mean of nothing NaN, linear with 0 input features is its bias), and gradients of
// the inputs' shapes (checked values where an input is not empty: nothing flowed, so 0, or the bias's
// row count); or a clear ember::Error naming the op (a max of nothing, as in PyTorch). Never a signal.
// To add an op: add its rows to zero_size_cases().
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "helpers.h"
#include "unary_cases.h"

namespace ember::testing {

struct ZeroSizeCase {
  std::string name;            // the op and its input shapes: "linear x[4, 0] w[3, 0] b[3]"
  std::vector<Tensor> inputs;  // CPU tensors; the floating ones get requires_grad (copied to the device first)
  std::function<Tensor(const std::vector<Tensor>&)> f;
  std::string error;           // non-empty: f must throw an ember::Error containing this
  Shape shape;                 // else: the output's shape,
  std::vector<double> values;  // its values (row-major; NaN matches NaN) when given,
  // and per input, when given, the gradient's values after backward from ones ({}: not checked).
  std::vector<std::vector<double>> grads;
};

inline Tensor f32(const Shape& shape) { return ones(shape); }
inline Tensor i64(const Shape& shape) { return zeros(shape, Dtype::Int64); }
inline Tensor mask(const Shape& shape) { return zeros(shape, Dtype::Bool); }

inline std::vector<ZeroSizeCase> zero_size_cases() {
  using In = const std::vector<Tensor>&;
  const double nan = std::nan("");
  std::vector<ZeroSizeCase> c;
  auto ok = [&](std::string name, std::vector<Tensor> inputs, std::function<Tensor(In)> f, Shape shape,
                std::vector<double> values = {}, std::vector<std::vector<double>> grads = {}) {
    c.push_back({std::move(name), std::move(inputs), std::move(f), "", std::move(shape), std::move(values),
                 std::move(grads)});
  };
  auto fails = [&](std::string name, std::vector<Tensor> inputs, std::function<Tensor(In)> f, std::string error) {
    c.push_back({std::move(name), std::move(inputs), std::move(f), std::move(error), {}, {}, {}});
  };

  // ---- Creation and random (the input only says which device)
  ok("zeros [0, 3]", {f32({1})}, [](In in) { return zeros({0, 3}, Dtype::Float32, in[0].device()); }, {0, 3});
  ok("full_like [2, 0]", {f32({2, 0})}, [](In in) { return full_like(in[0], 7.0); }, {2, 0});
  ok("arange(0)", {f32({1})}, [](In) { return arange(0); }, {0});
  ok("arange(5, 5)", {f32({1})}, [](In) { return arange(5, 5); }, {0});
  ok("from_vector {}", {f32({1})}, [](In in) { return from_vector(std::vector<float>{}, {}, in[0].device()); }, {0});
  ok("uniform_ [0, 3]", {f32({1})}, [](In in) {
    Tensor t = zeros({0, 3}, Dtype::Float32, in[0].device());
    return uniform_(t, -1, 1);
  }, {0, 3});
  ok("normal_ [3, 0]", {f32({1})}, [](In in) {
    Tensor t = zeros({3, 0}, Dtype::Float32, in[0].device());
    return normal_(t, 0, 1);
  }, {3, 0});
  ok("rand [0]", {f32({1})}, [](In) { return rand({0}); }, {0});

  // ---- Element-wise arithmetic, broadcasting an empty dim against a full one
  ok("add [0, 3] + [0, 3]", {f32({0, 3}), f32({0, 3})}, [](In in) { return in[0] + in[1]; }, {0, 3});
  ok("add [0, 3] + [3]", {f32({0, 3}), f32({3})}, [](In in) { return in[0] + in[1]; }, {0, 3}, {}, {{}, {0, 0, 0}});
  ok("sub [2, 0] - [1, 0]", {f32({2, 0}), f32({1, 0})}, [](In in) { return in[0] - in[1]; }, {2, 0});
  ok("mul [0, 3] * [1, 3]", {f32({0, 3}), f32({1, 3})}, [](In in) { return in[0] * in[1]; }, {0, 3}, {},
     {{}, {0, 0, 0}});
  ok("div [3] / [0, 3]", {f32({3}), f32({0, 3})}, [](In in) { return in[0] / in[1]; }, {0, 3}, {}, {{0, 0, 0}, {}});
  ok("mul [0] * scalar", {f32({0}), f32({})}, [](In in) { return in[0] * in[1]; }, {0}, {}, {{}, {0}});
  ok("eq [0, 3] [0, 3]", {f32({0, 3}), f32({0, 3})}, [](In in) { return eq(in[0], in[1]); }, {0, 3});
  ok("gt [0, 3] [3]", {f32({0, 3}), f32({3})}, [](In in) { return gt(in[0], in[1]); }, {0, 3});
  ok("lt [2, 0] [2, 0]", {f32({2, 0}), f32({2, 0})}, [](In in) { return lt(in[0], in[1]); }, {2, 0});
  ok("ne [0, 3] [3]", {f32({0, 3}), f32({3})}, [](In in) { return ne(in[0], in[1]); }, {0, 3});
  ok("le [0] number", {f32({0})}, [](In in) { return le(in[0], 1); }, {0});
  ok("ge [2, 0] int64 number", {i64({2, 0})}, [](In in) { return ge(in[0], 1.5); }, {2, 0});
  ok("int64 [0] * number", {i64({0})}, [](In in) { return in[0] * 2; }, {0});
  ok("int64 [0, 2] / number", {i64({0, 2})}, [](In in) { return in[0] / 2; }, {0, 2});
  ok("logical_and [0, 3] [3]", {mask({0, 3}), mask({3})}, [](In in) { return logical_and(in[0], in[1]); }, {0, 3});
  ok("logical_or [2, 0] float", {f32({2, 0}), mask({1})}, [](In in) { return logical_or(in[0], in[1]); }, {2, 0});
  ok("logical_not [0]", {mask({0})}, [](In in) { return ~in[0]; }, {0});
  ok("tril [0, 3]", {f32({0, 3})}, [](In in) { return tril(in[0]); }, {0, 3});
  ok("triu [2, 3, 0]", {f32({2, 3, 0})}, [](In in) { return triu(in[0], 1); }, {2, 3, 0});
  ok("tril [3, 2] of a [0, 3, 2] batch", {f32({0, 3, 2})}, [](In in) { return tril(in[0], -1); }, {0, 3, 2});

  // ---- Element-wise math
  for (const UnaryCase& u : every_unary_op()) {  // every one of core/unary_math.h's lists
    ok(std::string(u.name) + " [0, 3]", {f32({0, 3})}, [op = u.op](In in) { return op(in[0]); }, {0, 3});
    ok(std::string(u.name) + " [3, 0] transposed", {f32({3, 0})},
       [op = u.op](In in) { return op(in[0].transpose(0, 1)); }, {0, 3});
  }
  ok("pow [0] exponent 0", {f32({0})}, [](In in) { return pow(in[0], 0.0); }, {0});
  ok("add_scalar [0]", {f32({0})}, [](In in) { return in[0] + 1.0; }, {0});
  ok("mul_scalar [0]", {f32({0})}, [](In in) { return in[0] * 2.0; }, {0});
  ok("1 / [0]", {f32({0})}, [](In in) { return 1.0 / in[0]; }, {0});

  // ---- Reductions: an empty sum is 0, an empty mean NaN (0 / 0), an empty max an error (PyTorch's rules)
  ok("sum [0, 3]", {f32({0, 3})}, [](In in) { return sum(in[0]); }, {}, {0});
  ok("sum [0, 3] dim 0", {f32({0, 3})}, [](In in) { return sum(in[0], {0}); }, {3}, {0, 0, 0});
  ok("sum [0, 3] dim 1", {f32({0, 3})}, [](In in) { return sum(in[0], {1}); }, {0});
  ok("sum [3, 0] dim 1 keepdim", {f32({3, 0})}, [](In in) { return sum(in[0], {1}, true); }, {3, 1}, {0, 0, 0});
  ok("sum [0]", {f32({0})}, [](In in) { return sum(in[0]); }, {}, {0});
  ok("mean [0, 3]", {f32({0, 3})}, [](In in) { return mean(in[0]); }, {}, {nan});
  ok("mean [0, 3] dim 0", {f32({0, 3})}, [](In in) { return mean(in[0], {0}); }, {3}, {nan, nan, nan});
  ok("mean [0, 3] dim 1", {f32({0, 3})}, [](In in) { return mean(in[0], {1}); }, {0});
  fails("max [0, 3]", {f32({0, 3})}, [](In in) { return max(in[0]); }, "max: cannot take the max over an empty dim 0 (shape [0, 3])");
  fails("max [0, 3] dim 0", {f32({0, 3})}, [](In in) { return max(in[0], {0}); }, "max: cannot take the max over an empty dim 0");
  ok("max [0, 3] dim 1", {f32({0, 3})}, [](In in) { return max(in[0], {1}); }, {0});
  ok("var [0, 3] dim 1", {f32({0, 3})}, [](In in) { return var(in[0], {1}); }, {0});
  fails("var [0, 3]", {f32({0, 3})}, [](In in) { return var(in[0]); }, "var: 0 elements with correction 1");
  fails("argmax [0, 3] dim 0", {f32({0, 3})}, [](In in) { return argmax(in[0], 0); }, "argmax: dim 0 is empty (shape [0, 3])");
  ok("argmax [0, 3] dim 1", {f32({0, 3})}, [](In in) { return argmax(in[0], 1); }, {0});
  ok("sum_to [0, 3] -> [1, 3]", {f32({0, 3})}, [](In in) { return sum_to(in[0], {1, 3}); }, {1, 3}, {0, 0, 0});
  ok("sum_to [2, 0] -> [0]", {f32({2, 0})}, [](In in) { return sum_to(in[0], {0}); }, {0});

  // ---- Linear algebra: 0 rows, 0 columns, 0 inner dim (the product is 0), 0 batch
  ok("matmul [0, 3] @ [3, 4]", {f32({0, 3}), f32({3, 4})}, [](In in) { return matmul(in[0], in[1]); }, {0, 4}, {},
     {{}, std::vector<double>(12, 0.0)});
  ok("matmul [2, 0] @ [0, 3]", {f32({2, 0}), f32({0, 3})}, [](In in) { return matmul(in[0], in[1]); }, {2, 3},
     {0, 0, 0, 0, 0, 0}, {{}, {}});
  ok("matmul [2, 3] @ [3, 0]", {f32({2, 3}), f32({3, 0})}, [](In in) { return matmul(in[0], in[1]); }, {2, 0}, {},
     {std::vector<double>(6, 0.0), {}});
  ok("matmul [0, 2, 3] @ [3, 4]", {f32({0, 2, 3}), f32({3, 4})}, [](In in) { return matmul(in[0], in[1]); },
     {0, 2, 4}, {}, {{}, std::vector<double>(12, 0.0)});
  ok("matmul [2, 0, 3] @ [2, 3, 4]", {f32({2, 0, 3}), f32({2, 3, 4})}, [](In in) { return matmul(in[0], in[1]); },
     {2, 0, 4}, {}, {{}, std::vector<double>(24, 0.0)});
  ok("matmul [2, 2, 0] @ [2, 0, 3] (transposed)", {f32({2, 2, 0}), f32({2, 3, 0})},
     [](In in) { return matmul(in[0], in[1].transpose(1, 2)); }, {2, 2, 3}, std::vector<double>(12, 0.0), {{}, {}});
  ok("matmul [0] @ [0]", {f32({0}), f32({0})}, [](In in) { return matmul(in[0], in[1]); }, {}, {0}, {{}, {}});
  ok("matmul [3, 0] @ [0]", {f32({3, 0}), f32({0})}, [](In in) { return matmul(in[0], in[1]); }, {3}, {0, 0, 0});
  ok("linear x[4, 0] w[3, 0] b[3]", {f32({4, 0}), f32({3, 0}), tensor({1, 2, 3})},
     [](In in) { return linear(in[0], in[1], in[2]); }, {4, 3}, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3},
     {{}, {}, {4, 4, 4}});
  ok("linear x[4, 0] w[3, 0]", {f32({4, 0}), f32({3, 0})}, [](In in) { return linear(in[0], in[1], Tensor()); },
     {4, 3}, std::vector<double>(12, 0.0), {{}, {}});
  ok("linear x[2, 2, 0] w[3, 0] b[3]", {f32({2, 2, 0}), f32({3, 0}), tensor({1, 2, 3})},
     [](In in) { return linear(in[0], in[1], in[2]); }, {2, 2, 3}, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3},
     {{}, {}, {4, 4, 4}});
  ok("linear x[0, 5] w[3, 5] b[3]", {f32({0, 5}), f32({3, 5}), f32({3})},
     [](In in) { return linear(in[0], in[1], in[2]); }, {0, 3}, {}, {{}, std::vector<double>(15, 0.0), {0, 0, 0}});
  ok("linear x[4, 5] w[0, 5] b[0]", {f32({4, 5}), f32({0, 5}), f32({0})},
     [](In in) { return linear(in[0], in[1], in[2]); }, {4, 0}, {}, {std::vector<double>(20, 0.0), {}, {}});

  // ---- Softmax and normalisation
  ok("softmax [0, 3] dim 1", {f32({0, 3})}, [](In in) { return softmax(in[0], 1); }, {0, 3});
  ok("softmax [3, 0] dim 1", {f32({3, 0})}, [](In in) { return softmax(in[0], 1); }, {3, 0});
  ok("softmax [0, 3] dim 0", {f32({0, 3})}, [](In in) { return softmax(in[0], 0); }, {0, 3});
  ok("log_softmax [0, 3] dim 1", {f32({0, 3})}, [](In in) { return log_softmax(in[0], 1); }, {0, 3});
  ok("log_softmax [3, 0] dim 1", {f32({3, 0})}, [](In in) { return log_softmax(in[0], 1); }, {3, 0});
  ok("layer_norm [0, 4]", {f32({0, 4}), f32({4}), f32({4})}, [](In in) { return layer_norm(in[0], in[1], in[2]); },
     {0, 4}, {}, {{}, {0, 0, 0, 0}, {0, 0, 0, 0}});
  ok("layer_norm [2, 0, 4] no affine", {f32({2, 0, 4})}, [](In in) { return layer_norm(in[0], Tensor(), Tensor()); },
     {2, 0, 4});
  fails("layer_norm [4, 0]", {f32({4, 0})}, [](In in) { return layer_norm(in[0], Tensor(), Tensor()); },
        "layer_norm: the last dim of input [4, 0] is empty");

  // ---- Attention: 0 batch, 0 tokens (0 queries and 0 keys), 0 width; fused and composed, without and with a band
  using Attention = Tensor (*)(const Tensor&, int64_t, const Tensor&, bool, Tensor*, AttentionBand);
  const std::vector<std::pair<const char*, Attention>> attentions = {{"attention", attention},
                                                                     {"attention_reference", attention_reference}};
  for (const auto& [name, op] : attentions) {
    for (const AttentionBand band : {AttentionBand{}, AttentionBand{1, 1}}) {
      const std::string n = std::string(name) + (band.on() ? " band" : "");
      const auto run = [op = op, band](int64_t heads, bool causal) {
        return [op, band, heads, causal](In in) {
          return op(in[0], heads, in.size() > 1 ? in[1] : Tensor(), causal, nullptr, band);
        };
      };
      ok(n + " B = 0", {f32({0, 3, 6}), mask({0, 3})}, run(2, false), {0, 3, 2});
      ok(n + " T = 0", {f32({2, 0, 6}), mask({2, 0})}, run(2, false), {2, 0, 2});
      ok(n + " T = 0 causal", {f32({2, 0, 6})}, run(1, true), {2, 0, 2});
      ok(n + " D = 0", {f32({2, 3, 0})}, run(1, false), {2, 3, 0});
      ok(n + " T = 0 weights", {f32({2, 0, 6})}, [op = op, band](In in) {
        Tensor w;
        Tensor out = op(in[0], 2, Tensor(), false, &w, band);
        // NOTE: compared as text: GCC 12.2 at -O3 -march=native built Shape({2, 2, 0, 0}) here as [2, 2, 2, 2].
        EMBER_CHECK(shape_str(w.shape()) == "[2, 2, 0, 0]", "weights {}", shape_str(w.shape()));
        return out;
      }, {2, 0, 2});
    }
  }
  // ---- scaled_dot_product_attention: 0 batch, 0 queries, 0 keys (every query sees nothing: output 0, no
  // gradient), 0-wide heads; fused and composed, without and with the causal mask
  for (bool fused : {true, false}) {
    const std::string n = fused ? "scaled_dot_product_attention" : "scaled_dot_product_attention_reference";
    const auto run = [fused](bool causal) {
      return [fused, causal](In in) {
        return fused ? scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), causal)
                     : scaled_dot_product_attention_reference(in[0], in[1], in[2], Tensor(), causal);
      };
    };
    ok(n + " B = 0", {f32({0, 2, 3, 4}), f32({0, 2, 5, 4}), f32({0, 2, 5, 3})}, run(false), {0, 2, 3, 3});
    ok(n + " T = 0", {f32({1, 2, 0, 4}), f32({1, 2, 5, 4}), f32({1, 2, 5, 3})}, run(true), {1, 2, 0, 3}, {},
       {{}, std::vector<double>(40, 0.0), std::vector<double>(30, 0.0)});
    ok(n + " S = 0", {f32({1, 1, 2, 2}), f32({1, 1, 0, 2}), f32({1, 1, 0, 3})}, run(false), {1, 1, 2, 3},
       std::vector<double>(6, 0.0), {{0, 0, 0, 0}, {}, {}});
    ok(n + " S = 0 causal", {f32({1, 1, 2, 2}), f32({1, 1, 0, 2}), f32({1, 1, 0, 3})}, run(true), {1, 1, 2, 3},
       std::vector<double>(6, 0.0));
    ok(n + " Dv = 0", {f32({1, 1, 2, 2}), f32({1, 1, 3, 2}), f32({1, 1, 3, 0})}, run(false), {1, 1, 2, 0}, {},
       {{0, 0, 0, 0}, std::vector<double>(6, 0.0), {}});
  }

  // ---- Indexing, masking and joining
  ok("embedding ids [0]", {f32({5, 3}), i64({0})}, [](In in) { return embedding(in[0], in[1]); }, {0, 3}, {},
     {std::vector<double>(15, 0.0), {}});
  ok("embedding ids [2, 0]", {f32({5, 3}), i64({2, 0})}, [](In in) { return embedding(in[0], in[1]); }, {2, 0, 3});
  ok("embedding weight [5, 0]", {f32({5, 0}), i64({2})}, [](In in) { return embedding(in[0], in[1]); }, {2, 0});
  ok("embedding weight [0, 3] ids [0]", {f32({0, 3}), i64({0})}, [](In in) { return embedding(in[0], in[1]); },
     {0, 3});
  fails("embedding weight [0, 3] ids [1]", {f32({0, 3}), i64({1})}, [](In in) { return embedding(in[0], in[1]); },
        "out of range for a vocabulary of 0 rows");
  ok("masked_fill [0, 3] mask [0, 3]", {f32({0, 3}), mask({0, 3})},
     [](In in) { return masked_fill(in[0], in[1], 5.0); }, {0, 3});
  ok("masked_fill [0, 3] mask [3]", {f32({0, 3}), mask({3})}, [](In in) { return masked_fill(in[0], in[1], 5.0); },
     {0, 3});
  ok("where [0, 3] [0, 3] [3]", {mask({0, 3}), f32({0, 3}), f32({3})},
     [](In in) { return where(in[0], in[1], in[2]); }, {0, 3}, {}, {{}, {}, {0, 0, 0}});
  ok("cat [0, 3] [2, 3] dim 0", {f32({0, 3}), f32({2, 3})}, [](In in) { return cat({in[0], in[1]}, 0); }, {2, 3},
     {1, 1, 1, 1, 1, 1}, {{}, {1, 1, 1, 1, 1, 1}});
  ok("cat [2, 0] [2, 3] dim 1", {f32({2, 0}), f32({2, 3})}, [](In in) { return cat({in[0], in[1]}, 1); }, {2, 3},
     {1, 1, 1, 1, 1, 1}, {{}, {1, 1, 1, 1, 1, 1}});
  ok("cat [0, 3] [0, 3] dim 1", {f32({0, 3}), f32({0, 3})}, [](In in) { return cat({in[0], in[1]}, 1); }, {0, 6});
  ok("stack [0] [0]", {f32({0}), f32({0})}, [](In in) { return stack({in[0], in[1]}, 0); }, {2, 0});
  ok("stack [0, 3] [0, 3] dim 1", {f32({0, 3}), f32({0, 3})}, [](In in) { return stack({in[0], in[1]}, 1); },
     {0, 2, 3});

  // ---- Regularisation and losses
  ok("dropout [0, 3]", {f32({0, 3})}, [](In in) { return dropout(in[0], 0.5, true); }, {0, 3});
  ok("dropout [0] p = 1", {f32({0})}, [](In in) { return dropout(in[0], 1.0, true); }, {0});
  ok("cross_entropy logits [0, 4]", {f32({0, 4}), i64({0})}, [](In in) { return cross_entropy(in[0], in[1]); }, {},
     {0}, {{}, {}});
  ok("cross_entropy logits [2, 0] all ignored", {f32({2, 0}), full({2}, -100, Dtype::Int64)},
     [](In in) { return cross_entropy(in[0], in[1]); }, {}, {0}, {{}, {}});
  fails("cross_entropy logits [2, 0]", {f32({2, 0}), i64({2})}, [](In in) { return cross_entropy(in[0], in[1]); },
        "out of range for 0 classes");

  // ---- Views and copies
  ok("view [0, 3] -> [3, 0]", {f32({0, 3})}, [](In in) { return in[0].view({3, 0}); }, {3, 0});
  ok("reshape [0, 3] -> [-1]", {f32({0, 3})}, [](In in) { return in[0].reshape({-1}); }, {0});
  fails("reshape [0, 3] -> [-1, 0]", {f32({0, 3})}, [](In in) { return in[0].reshape({-1, 0}); },
        "reshape: cannot infer -1 in [-1, 0] for 0 elements");
  ok("flatten [2, 0]", {f32({2, 0})}, [](In in) { return in[0].flatten(); }, {0});
  ok("permute [0, 2, 3]", {f32({0, 2, 3})}, [](In in) { return in[0].permute({2, 0, 1}); }, {3, 0, 2});
  ok("narrow [2, 3] to length 0", {f32({2, 3})}, [](In in) { return in[0].narrow(0, 1, 0); }, {0, 3}, {},
     {std::vector<double>(6, 0.0)});
  ok("slice [2, 3] [3, 3)", {f32({2, 3})}, [](In in) { return in[0].slice(1, 3, 3); }, {2, 0}, {},
     {std::vector<double>(6, 0.0)});
  fails("select [0, 3] index 0", {f32({0, 3})}, [](In in) { return in[0].select(0, 0); },
        "select: index 0 out of range for dim 0 of size 0");
  ok("select [3, 0] index 1", {f32({3, 0})}, [](In in) { return in[0].select(0, 1); }, {0});
  ok("expand [1, 3] -> [0, 3]", {f32({1, 3})}, [](In in) { return in[0].expand({0, 3}); }, {0, 3}, {}, {{0, 0, 0}});
  ok("unsqueeze [0]", {f32({0})}, [](In in) { return in[0].unsqueeze(1); }, {0, 1});
  ok("squeeze [0, 1]", {f32({0, 1})}, [](In in) { return in[0].squeeze(1); }, {0});
  ok("contiguous [3, 0] transposed", {f32({3, 0})}, [](In in) { return in[0].transpose(0, 1).contiguous(); }, {0, 3});
  ok("clone [0, 3]", {f32({0, 3})}, [](In in) { return in[0].clone(); }, {0, 3});
  ok("to float64 [0, 3]", {f32({0, 3})}, [](In in) { return in[0].to(Dtype::Float64); }, {0, 3});
  ok("chunk [0, 3] into 3, piece 2", {f32({0, 3})}, [](In in) { return chunk(in[0], 3, 0)[2]; }, {0, 3});
  ok("chunk [2, 3] along 1, piece 1 of 2", {f32({2, 3})}, [](In in) { return chunk(in[0], 2, 1)[1]; }, {2, 1}, {},
     {{0, 0, 1, 0, 0, 1}});
  ok("split [2, 3] sizes 0, 3", {f32({2, 3})}, [](In in) { return split(in[0], {0, 3}, 1)[0]; }, {2, 0}, {},
     {std::vector<double>(6, 0.0)});
  ok("split [0] size 2", {f32({0})}, [](In in) { return split(in[0], 2)[0]; }, {0});
  ok("unbind [3, 0] row 1", {f32({3, 0})}, [](In in) { return unbind(in[0])[1]; }, {0});
  ok("rearrange [0, 4] b (h d) -> h b d", {f32({0, 4})},
     [](In in) { return rearrange(in[0], "b (h d) -> h b d", {{"h", 2}}); }, {2, 0, 2});
  ok("einsum [2, 0] [0, 3]", {f32({2, 0}), f32({0, 3})}, [](In in) { return einsum("ij,jk->ik", in[0], in[1]); },
     {2, 3}, {0, 0, 0, 0, 0, 0});
  ok("einsum [0, 3] sum", {f32({0, 3})}, [](In in) { return einsum("i j ->", in[0]); }, {}, {0});
  ok("to cpu and back [0, 3]", {f32({0, 3})}, [](In in) { return in[0].to(Device::cpu()).to(in[0].device()); },
     {0, 3});

  // ---- In-place updates (no autograd)
  ok("fill_ copy_ add_ mul_ zero_ [0, 3]", {f32({0, 3})}, [](In in) {
    Tensor t = in[0].detach().clone();
    t.fill_(2.0).add_(in[0].detach()).mul_(3.0).zero_();
    return t.copy_(zeros({3}, Dtype::Float32, t.device()));
  }, {0, 3});
  return c;
}

// Runs every case on `device`: the inputs are copied there, floating ones require grad.
inline void run_zero_size_cases(Device device) {
  for (const ZeroSizeCase& zc : zero_size_cases()) {
    INFO("case: " << zc.name << " on " << device.str());
    std::vector<Tensor> inputs;
    for (const Tensor& t : zc.inputs) {
      Tensor moved = t.to(device);
      if (is_floating(moved.dtype())) moved.requires_grad_();
      inputs.push_back(moved);
    }
    if (!zc.error.empty()) {
      check_error([&] { zc.f(inputs); }, zc.error);
      continue;
    }
    Tensor y;
    try {
      y = zc.f(inputs);
    } catch (const Error& e) {
      FAIL_CHECK("unexpected error: " << std::string(e.what()));
      continue;
    }
    CHECK(shape_str(y.shape()) == shape_str(zc.shape));
    if (y.shape() != zc.shape) continue;
    if (!zc.values.empty()) {
      std::vector<double> got = y.detach().to(Device::cpu()).to_vector<double>();
      REQUIRE(got.size() == zc.values.size());
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": got " << got[i] << ", expected " << zc.values[i]);
        CHECK((std::isnan(zc.values[i]) ? std::isnan(got[i]) : std::abs(got[i] - zc.values[i]) <= 1e-6));
      }
    }
    if (!y.requires_grad()) continue;
    try {
      y.backward(ones_like(y.detach()));
    } catch (const Error& e) {
      FAIL_CHECK("unexpected error in backward: " << std::string(e.what()));
      continue;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad()) continue;
      INFO("gradient of input " << i << " " << shape_str(inputs[i].shape()));
      Tensor g = inputs[i].grad();
      const bool expected = i < zc.grads.size() && !zc.grads[i].empty();
      if (expected) REQUIRE(g.defined());
      if (!g.defined()) continue;  // the op sent it nothing (nothing flowed, or an input it does not differentiate)
      CHECK(g.shape() == inputs[i].shape());
      CHECK(g.device() == device);
      if (expected) check_values(g.to(Device::cpu()), zc.grads[i], 1e-6);
    }
  }
}

}  // namespace ember::testing
