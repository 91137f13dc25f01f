// The linear op (x W^T + b in one GEMM): known numbers, agreement with matmul + add, gradchecks,
// strided inputs, and bad inputs.
#include <vector>

#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

DEVICE_TEST_CASE("linear: known numbers, with and without bias") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  Tensor w = tensor({1, 0, -1, 2, 1, 0}, {2, 3}).to(device);  // rows: [1, 0, -1], [2, 1, 0]
  Tensor b = tensor({10, 20}).to(device);
  // x W^T = [[1 - 3, 2 + 2], [4 - 6, 8 + 5]] = [[-2, 4], [-2, 13]]
  check_values(linear(x, w, Tensor()), {-2, 4, -2, 13});
  check_values(linear(x, w, b), {8, 24, 8, 33});
}

TEST_CASE("linear: matches matmul(x, W^T) + b, values and gradients, for 3-D and strided inputs") {
  Generator gen(4);
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    Tensor x = uniform({3, 5, 7}, -1, 1, gen).requires_grad_();
    Tensor w = uniform({6, 7}, -1, 1, gen).requires_grad_();
    Tensor b = with_bias ? uniform({6}, -1, 1, gen).requires_grad_() : Tensor();
    Tensor x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
    Tensor b2 = with_bias ? b.detach().clone().requires_grad_() : Tensor();
    Tensor y = linear(x, w, b);
    Tensor reference = matmul(x2, w2.transpose(0, 1));
    if (with_bias) reference = reference + b2;
    check_close(y, reference, 1e-6);
    Tensor g = uniform(y.shape(), -1, 1, gen);
    sum(y * g).backward();
    sum(reference * g).backward();
    check_close(x.grad(), x2.grad(), 1e-5);
    check_close(w.grad(), w2.grad(), 1e-5);
    if (with_bias) check_close(b.grad(), b2.grad(), 1e-5);
  }
  // A transposed input and a transposed weight are read correctly.
  Tensor xt = uniform({7, 4}, -1, 1, gen).transpose(0, 1);
  Tensor wt = uniform({7, 5}, -1, 1, gen).transpose(0, 1);
  check_close(linear(xt, wt, Tensor()), matmul(xt, wt.transpose(0, 1)), 1e-6);
}

DEVICE_TEST_CASE("gradcheck: linear in float64") {
  check_gradient(device, [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                 {random64({2, 3, 4}, 1), random64({5, 4}, 2), random64({5}, 3)});
  check_gradient(device, [](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor()); },
                 {random64({3, 4}, 4), random64({2, 4}, 5)});
  // Non-contiguous operands (a transposed input, a transposed weight) and a broadcast bias (expanded from [1]).
  check_gradient([](const std::vector<Tensor>& in) {
    return linear(in[0].transpose(0, 1), in[1].transpose(0, 1), in[2].expand({5}));
  }, {random64({4, 3}, 6), random64({4, 5}, 7), random64({1}, 8)});
}

TEST_CASE("linear: zero input features give the bias on every row (PyTorch's answer), not a division by zero") {
  // x [4, 0], w [3, 0]: rows were counted as x.numel() / 0 (SIGFPE). Also tests/zero_size_cases.h.
  Tensor x = zeros({4, 0}).requires_grad_(), w = zeros({3, 0}).requires_grad_();
  Tensor b = tensor({1, 2, 3}).requires_grad_();
  Tensor y = linear(x, w, b);
  CHECK(y.shape() == Shape({4, 3}));
  check_values(y, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  check_values(linear(x, w, Tensor()), std::vector<double>(12, 0.0));
  sum(y).backward();
  CHECK(x.grad().shape() == Shape({4, 0}));
  CHECK(w.grad().shape() == Shape({3, 0}));
  check_values(b.grad(), {4, 4, 4});
}

TEST_CASE("linear: bad inputs are clear errors") {
  check_error([] { linear(zeros({2, 3}), zeros({4, 5}), Tensor()); }, "does not end in in_features 5");
  check_error([] { linear(zeros({2, 3}), zeros({3}), Tensor()); }, "weight must be [out_features, in_features]");
  check_error([] { linear(zeros({2, 3}), zeros({4, 3}), zeros({5})); }, "bias must be [4]");
  check_error([] { linear(zeros({2, 3}), zeros({4, 3}, Dtype::Float64), Tensor()); }, "input and weight dtypes differ (float32 and float64)");
  check_error([] { linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, Dtype::Float64)); }, "the bias of the weight's dtype");
}
