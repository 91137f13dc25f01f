// The saved-tensor rule (autograd/saved_tensor.h), checked for every differentiable op of autograd/ops.h:
// what an op's backward reads is kept with save(), so that changing it in place between the forward
// and the backward is an ember::Error naming the op, never a gradient computed from the new values;
// and what the backward does not read may change freely (no false alarm, the same gradient).
// To add an op: add its row to saved_tensor_cases(), or write it in the op's test file with
// SAVED_TENSOR_ROWS (tests/saved_tensor_rows.h); an element-wise op gets its row from core/unary_math.h's
// lists (tests/unary_cases.h). An op that records a backward without a row fails the last case here.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "tests/helpers.h"
#include "tests/saved_tensor_rows.h"
#include "tests/unary_cases.h"

using namespace ember;
using namespace ember::testing;

namespace {

// Whether the backward reads a tensor (Read, tests/saved_tensor_rows.h) on this device.
bool reads_on(Read read, Device device) {
  return read == Read::Yes || (read == Read::OnCpu && device.is_cpu()) || (read == Read::OnGpu && device.is_cuda());
}

Tensor ids(std::initializer_list<double> values, const Shape& shape) { return tensor(values, shape, Dtype::Int64); }
Tensor bools(std::initializer_list<double> values, const Shape& shape) { return tensor(values, shape, Dtype::Bool); }

// One row per differentiable op of autograd/ops.h. A composed op (mean, var, sum_to) is the ops it is made
// of: its row says that they read nothing the caller can change. (The attention references are
// composed of the rows' matmul, softmax and masked_fill; their errors name those.)
std::vector<SavedCase> saved_tensor_cases(Device device) {
  std::vector<SavedCase> c;
  auto expect = [&c](std::string op, std::vector<Tensor> inputs, std::function<Tensor(In)> f, std::vector<Read> reads,
                     Read output = Read::No, std::vector<size_t> frozen = {}) {
    c.push_back({std::move(op), std::move(inputs), std::move(f), std::move(reads), output, std::move(frozen)});
  };
  const Read No = Read::No, Yes = Read::Yes;
  // ---- Element-wise math: what its derivative reads (core/unary_math.h), the input or the output.
  uint64_t seed = 100;
  for (const UnaryCase& u : every_unary_op())
    expect(u.name, {random64({2, 3}, ++seed, u.low, u.high)}, [op = u.op](In in) { return op(in[0]); },
           {u.reads == math::Reads::Input ? Yes : No}, u.reads == math::Reads::Output ? Yes : No);

  const Tensor a = random64({2, 3}, 1), row = random64({3}, 2, 0.5, 1.5);
  // ---- Arithmetic: a product and a quotient read their operands, a sum and a difference nothing.
  expect("add", {a, row}, [](In in) { return in[0] + in[1]; }, {No, No});
  expect("sub", {a, row}, [](In in) { return in[0] - in[1]; }, {No, No});
  expect("mul", {a, row}, [](In in) { return in[0] * in[1]; }, {Yes, Yes});
  expect("div", {a, row}, [](In in) { return in[0] / in[1]; }, {Yes, Yes});

  // ---- Linear algebra and normalisation
  expect("matmul", {a, random64({3, 4}, 3)}, [](In in) { return matmul(in[0], in[1]); }, {Yes, Yes});
  expect("matmul", {a, random64({4, 3}, 4)},  // a transposed operand is read in place, a view of it saved
         [](In in) { return matmul(in[0], in[1].transpose(0, 1)); }, {Yes, Yes});
  expect("linear", {a, random64({4, 3}, 5), random64({4}, 6)},
         [](In in) { return linear(in[0], in[1], in[2]); }, {Yes, Yes, No});
  // An operand read only for another's gradient is not kept when that one is frozen: it may change.
  expect("mul", {a, row}, [](In in) { return in[0] * in[1]; }, {No, Yes}, No, {1});
  expect("mul", {a, row}, [](In in) { return in[0] * in[1]; }, {Yes, No}, No, {0});
  expect("div", {a, row}, [](In in) { return in[0] / in[1]; }, {No, Yes}, No, {1});
  expect("div", {a, row}, [](In in) { return in[0] / in[1]; }, {Yes, Yes}, No, {0});
  expect("matmul", {a, random64({3, 4}, 3)}, [](In in) { return matmul(in[0], in[1]); }, {No, Yes}, No, {1});
  expect("matmul", {a, random64({3, 4}, 3)}, [](In in) { return matmul(in[0], in[1]); }, {Yes, No}, No, {0});
  expect("linear", {a, random64({4, 3}, 5), random64({4}, 6)},
         [](In in) { return linear(in[0], in[1], in[2]); }, {No, Yes, No}, No, {1, 2});
  expect("linear", {a, random64({4, 3}, 5), random64({4}, 6)},  // a first layer: its input frozen
         [](In in) { return linear(in[0], in[1], in[2]); }, {Yes, No, No}, No, {0});
  expect("layer_norm", {a, random64({3}, 7), random64({3}, 8)},
         [](In in) { return layer_norm(in[0], in[1], in[2]); }, {Yes, Yes, No});
  expect("softmax", {a}, [](In in) { return softmax(in[0], 1); }, {No}, Yes);
  expect("log_softmax", {a}, [](In in) { return log_softmax(in[0], 0); }, {No}, Yes);
  // The targets: on a GPU the op checks them on a host copy and uploads that (Read::OnCpu).
  expect("cross_entropy", {random64({3, 4}, 10), ids({1, 0, 3}, {3})},
         [](In in) { return cross_entropy(in[0], in[1]); }, {Yes, Read::OnCpu});
  expect("cross_entropy", {random64({3, 4}, 10), ids({1, -100, 3}, {3})},
         [](In in) { return cross_entropy(in[0], in[1], -100); }, {Yes, Read::OnCpu});

  // ---- Attention: qkv [B, T, 3 D] and the padding mask [B, T]; the CPU's backward reads the
  // probabilities it kept, a GPU's fused one the output (window attention's reads it on both).
  const Tensor qkv = random64({2, 3, 12}, 11), padding = bools({0, 0, 1, 0, 0, 0}, {2, 3});
  expect("attention", {qkv, padding}, [](In in) { return attention(in[0], 2, in[1]); }, {Yes, Yes},
         Read::OnGpu);
  expect("attention", {qkv}, [](In in) { return attention(in[0], 2, Tensor(), /*causal=*/true); }, {Yes},
         Read::OnGpu);
  const Tensor qkv5 = random64({2, 5, 12}, 12), padding5 = bools({0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {2, 5});
  expect("window_attention", {qkv5, padding5},
         [](In in) { return window_attention(in[0], 2, /*window=*/1, /*global=*/1, in[1]); }, {Yes, Yes}, Yes);
  // scaled_dot_product_attention reads q, k, v and the mask, and (as attention) the probabilities it kept on the
  // CPU, the output on a GPU.
  const Tensor q4 = random64({1, 2, 3, 2}, 41), k4 = random64({1, 2, 4, 2}, 42), v4 = random64({1, 2, 4, 3}, 43);
  const Tensor allows = bools({1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0}, {3, 4});
  expect("scaled_dot_product_attention", {q4, k4, v4, allows},
         [](In in) { return scaled_dot_product_attention(in[0], in[1], in[2], in[3]); }, {Yes, Yes, Yes, Yes},
         Read::OnGpu);

  // ---- Indexing, masking, joining: they move values, their backwards read masks and shapes only.
  expect("embedding", {random64({5, 3}, 13), ids({4, 0, 4, 2}, {2, 2})},
         [](In in) { return embedding(in[0], in[1]); }, {No, No});
  expect("masked_fill", {a, bools({1, 0, 0}, {3})}, [](In in) { return masked_fill(in[0], in[1], -2.0); },
         {No, Yes});
  expect("where", {bools({1, 0, 1, 0, 0, 1}, {2, 3}), a, row},
         [](In in) { return where(in[0], in[1], in[2]); }, {Yes, No, No});
  expect("cat", {a, random64({1, 3}, 14)}, [](In in) { return cat({in[0], in[1]}, 0); }, {No, No});
  expect("stack", {a, random64({2, 3}, 15)}, [](In in) { return stack({in[0], in[1]}, 1); }, {No, No});

  // ---- Reductions: max reads its input and its result (the ties); the others nothing.
  expect("sum", {a}, [](In in) { return sum(in[0], {1}); }, {No});
  expect("mean", {a}, [](In in) { return mean(in[0]); }, {No});
  expect("max", {a}, [](In in) { return max(in[0], {1}); }, {Yes}, Yes);
  expect("max", {a}, [](In in) { return max(in[0]); }, {Yes}, Yes);
  expect("var", {a}, [](In in) { return var(in[0], {0}); }, {No});
  expect("sum_to", {a}, [](In in) { return sum_to(in[0], {1, 3}); }, {No});

  // ---- Dropout: the mask comes again from (seed, offset), not from the input.
  expect("dropout", {a},
         [](In in) {
           Generator gen(7);
           return dropout(in[0], 0.5, /*training=*/true, gen);
         },
         {No});

  // ---- Views and conversions: only shapes.
  expect("view", {a}, [](In in) { return in[0].view({3, 2}); }, {No});
  expect("reshape", {a}, [](In in) { return in[0].transpose(0, 1).reshape({6}); }, {No});
  expect("permute", {a}, [](In in) { return in[0].permute({1, 0}); }, {No});
  expect("narrow", {a}, [](In in) { return in[0].narrow(1, 1, 2); }, {No});
  expect("select", {a}, [](In in) { return in[0].select(0, 1); }, {No});
  expect("expand", {row}, [](In in) { return in[0].expand({2, 3}); }, {No});
  expect("squeeze", {a}, [](In in) { return in[0].unsqueeze(0).squeeze(0); }, {No});
  expect("unsqueeze", {a}, [](In in) { return in[0].unsqueeze(1); }, {No});
  expect("clone", {a}, [](In in) { return in[0].clone(); }, {No});
  expect("contiguous", {a}, [](In in) { return in[0].transpose(0, 1).contiguous(); }, {No});
  expect("to", {a}, [](In in) { return in[0].to(Dtype::Float32); }, {No});

  // ---- Activation checkpointing (autograd/checkpoint.h) keeps its inputs for the recompute, whatever fn reads.
  expect("checkpoint", {a, row},
         [](In in) { return checkpoint([](const std::vector<Tensor>& x) { return x[0] + x[1]; }, {in[0], in[1]}); },
         {Yes, Yes});

  if (device.is_cuda()) {  // targets staged on the GPU (stage_ids): read there, so saved like the others
    expect("cross_entropy", {random64({3, 4}, 16), ids({2, 0, 3}, {3})},
           [](In in) { return cross_entropy(in[0], DeviceIds{in[1], Tensor(), 4}); }, {Yes, Yes});
  }
  // ---- The rows written in the ops' own test files (SAVED_TENSOR_ROWS).
  SavedRows registered{device, {}};
  for (SavedRowsFunction rows : registered_saved_rows()) rows(registered);
  for (SavedCase& row : registered.cases) c.push_back(std::move(row));
  return c;
}

// One forward and backward of `c` on `device`. `changed`: the input changed in place between the
// two (its index), the output (inputs.size()), or nothing (-1). The inputs' gradients, or the error.
std::vector<Tensor> forward_and_backward(const SavedCase& c, Device device, int changed) {
  std::vector<Tensor> leaves, in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor leaf = c.inputs[i].clone().to(device);
    // A floating input is a function of a leaf (a clone: it reads nothing), as a layer's input is.
    const bool frozen = std::find(c.frozen.begin(), c.frozen.end(), i) != c.frozen.end();
    if (is_floating(leaf.dtype()) && !frozen) leaf.requires_grad_();
    leaves.push_back(leaf);
    in.push_back(is_floating(leaf.dtype()) ? leaf.clone() : leaf);
  }
  Tensor y = c.f(in);
  Generator gen(3);
  Tensor seed = uniform(y.shape(), -1, 1, gen, y.dtype()).to(device);
  if (changed >= 0) {
    NoGradGuard no_grad;
    Tensor& target = changed == int(in.size()) ? y : in[size_t(changed)];
    target.fill_(is_floating(target.dtype()) ? 0.375 : 0.0);  // for ids and masks: 0, in range and false
  }
  y.backward(seed);
  std::vector<Tensor> grads;
  for (const Tensor& leaf : leaves)
    if (leaf.requires_grad()) grads.push_back(leaf.grad());
  return grads;
}

}  // namespace

DEVICE_TEST_CASE("autograd: every op's backward reads only what it saved: changed in place, an error or free") {
  for (const SavedCase& c : saved_tensor_cases(device)) {
    const std::string row = "op " + c.op + (c.frozen.empty() ? "" : ", some inputs frozen");
    INFO(row);
    const std::vector<Tensor> unchanged = forward_and_backward(c, device, -1);
    for (size_t i = 0; i <= c.inputs.size(); ++i) {
      const bool output = i == c.inputs.size();
      INFO((output ? std::string("its output") : "input " + std::to_string(i)) << " changed in place");
      if (reads_on(output ? c.output : c.reads[i], device)) {
        check_error([&] { forward_and_backward(c, device, int(i)); },
                    "backward of " + c.op + ": one of the tensors needed for its gradient");
        continue;
      }
      // Not read: no error, and the gradients of an unchanged run (a backward reading an unsaved
      // tensor would give others).
      std::vector<Tensor> grads = forward_and_backward(c, device, int(i));
      REQUIRE(grads.size() == unchanged.size());
      for (size_t k = 0; k < grads.size(); ++k) {
        INFO("the gradient of input " << k);
        check_close(grads[k].to(Device::cpu()), unchanged[k].to(Device::cpu()), 1e-12);
      }
    }
  }
}

TEST_CASE("autograd: the saved-tensor walk has a row for every op that records a backward") {
  // Each record("<op>", ...) of autograd/ops/ and autograd/ names an op: one without a row in
  // saved_tensor_cases() fails here. (The ops that record a name held in a variable are the
  // element-wise ops, whose rows come from core/unary_math.h's lists, softmax / log_softmax, and attention /
  // window_attention, one op named by its band: both have rows above.)
  std::set<std::string> rows;
  for (const SavedCase& c : saved_tensor_cases(Device::cpu())) rows.insert(c.op);
  const std::filesystem::path root = std::filesystem::path(EMBER_TEST_DATA).parent_path().parent_path();
  const std::regex recorded(R"re(record\("(\w+)")re");
  int found = 0;
  for (const char* folder : {"autograd/ops", "autograd"}) {
    for (const auto& entry : std::filesystem::directory_iterator(root / folder)) {
      if (entry.path().extension() != ".cpp") continue;
      std::ifstream file(entry.path());
      std::stringstream text;
      text << file.rdbuf();
      const std::string source = text.str();
      for (std::sregex_iterator m(source.begin(), source.end(), recorded), end; m != end; ++m) {
        const std::string op = (*m)[1];
        INFO(entry.path().string() << " records " << op);
        CHECK(rows.count(op) == 1);
        ++found;
      }
    }
  }
  CHECK(found >= 20);  // the scan read the op files (29 literal names when written; ops merged since may lower it)
}
