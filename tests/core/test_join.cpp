// cat and stack: values along every dim, strided inputs, gradchecks, errors naming the input and dim.
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

DEVICE_TEST_CASE("cat: values along each dim") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  Tensor b = tensor({7, 8, 9}, {1, 3}).to(device);
  Tensor c = tensor({10, 20}, {2, 1}).to(device);
  Tensor rows = cat({a, b}, 0);
  CHECK(rows.shape() == Shape{3, 3});
  check_values(rows, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor cols = cat({c, a, c}, -1);
  CHECK(cols.shape() == Shape{2, 5});
  check_values(cols, {10, 1, 2, 3, 10, 20, 4, 5, 6, 20});
  // A transposed input, an empty one, a single one (a copy), and integers.
  check_values(cat({a.transpose(0, 1), zeros({0, 2}, Dtype::Float32, device), tensor({0, 0}, {1, 2}).to(device)}, 0), {1, 4, 2, 5, 3, 6, 0, 0});
  Tensor single = cat({a}, 1);
  CHECK(single.impl() != a.impl());
  check_values(single, {1, 2, 3, 4, 5, 6});
  check_values(cat({arange(2).to(device), arange(3).to(device)}, 0), {0, 1, 0, 1, 2});
  Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}).to(device);
  check_values(cat({x, x * 10.0}, 1), {1, 2, 3, 4, 10, 20, 30, 40, 5, 6, 7, 8, 50, 60, 70, 80});
}

DEVICE_TEST_CASE("stack: a new dim anywhere") {
  Tensor a = tensor({1, 2, 3}).to(device);
  Tensor b = tensor({4, 5, 6}).to(device);
  Tensor s0 = stack({a, b}, 0);
  CHECK(s0.shape() == Shape{2, 3});
  check_values(s0, {1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, 1);
  CHECK(s1.shape() == Shape{3, 2});
  check_values(s1, {1, 4, 2, 5, 3, 6});
  CHECK(stack({a, b}, -1).shape() == Shape{3, 2});
  Tensor scalars = stack({scalar(1).to(device), scalar(2).to(device), scalar(3).to(device)}, 0);
  CHECK(scalars.shape() == Shape{3});
  check_values(scalars, {1, 2, 3});
}

DEVICE_TEST_CASE("gradcheck: cat and stack") {
  check_gradient(device, [](auto& in) { return cat({in[0], in[1], in[2]}, 0); },
                 {random64({2, 3}, 1), random64({1, 3}, 2), random64({4, 3}, 3)});
  check_gradient(device, [](auto& in) { return cat({in[0], in[1]}, 1); }, {random64({2, 2, 3}, 4), random64({2, 1, 3}, 5)});
  check_gradient(device, [](auto& in) { return cat({in[0].transpose(0, 1), in[1].narrow(1, 1, 2)}, -1); },
                 {random64({4, 3}, 6), random64({3, 5}, 7)});
  // The same tensor twice: its gradient sums both slices.
  check_gradient(device, [](auto& in) { return cat({in[0], in[0] * 2.0}, 0); }, {random64({2, 3}, 8)});
  Tensor constant = random64({2, 3}, 9).to(device);
  check_gradient(device, [constant](auto& in) { return cat({constant, in[0]}, 0); }, {random64({1, 3}, 10)});
  check_gradient(device, [](auto& in) { return stack({in[0], in[1]}, 1); }, {random64({2, 3}, 11), random64({2, 3}, 12)});
  check_gradient(device, [](auto& in) { return stack({in[0].transpose(0, 1), in[1]}, 0); }, {random64({3, 2}, 13), random64({2, 3}, 14)});
}

TEST_CASE("cat: only inputs that require grad get one") {
  Tensor a = ones({2}, Dtype::Float64).requires_grad_();
  Tensor b = ones({3}, Dtype::Float64);
  cat({b, a}, 0).backward(tensor({1, 2, 3, 4, 5}, {}, Dtype::Float64));
  check_values(a.grad(), {4, 5});
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("cat and stack: errors") {
  check_error([] { cat({}, 0); }, "cat: expected a non-empty list of tensors");
  check_error([] { stack({}, 0); }, "stack: expected a non-empty list of tensors");
  check_error([] { cat({zeros({2, 3}), zeros({2, 3}), zeros({2, 4})}, 0); },
              "cat: input 2 has shape [2, 4], but input 0 has [2, 3]: sizes differ in dim 1 (concatenating along dim 0)");
  check_error([] { cat({zeros({2, 3}), zeros({3})}, 0); }, "cat: input 1 has shape [3] (1 dims), but input 0 has [2, 3] (2 dims)");
  check_error([] { cat({zeros({2}), zeros({2}, Dtype::Float64)}, 0); }, "cat: input 1 has dtype float64, but input 0 has float32");
  check_error([] { cat({scalar(1), scalar(2)}, 0); }, "cat: input 0 is 0-dim");
  check_error([] { cat({zeros({2, 3})}, 2); }, "cat: dim 2 out of range");
  check_error([] { stack({zeros({2, 3}), zeros({3, 2})}, 0); }, "stack: input 1 has shape [3, 2], but input 0 has [2, 3]");
  check_error([] { stack({zeros({2}), zeros({2}, Dtype::Int64)}, 0); }, "stack: input 1 has dtype int64, but input 0 has float32");
  check_error([] { stack({zeros({2, 3})}, 3); }, "stack: dim 3 out of range");
}

CUDA_TEST_CASE("cat and stack: inputs on different devices are an error") {
  check_error([] { cat({zeros({2}), zeros({2}, Dtype::Float32, Device::cuda())}, 0); }, "cat: input 1 is on cuda:0, but input 0 is on cpu");
  check_error([] { stack({zeros({2}, Dtype::Float32, Device::cuda()), zeros({2})}, 0); }, "stack: input 1 is on cpu, but input 0 is on cuda:0");
}
