// masked_fill and where: values with broadcasting, bool masks from comparisons and conversions,
// gradchecks (broadcast and non-contiguous inputs), errors.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {
Tensor bools(std::initializer_list<double> values, const Shape& shape = {}) {
  return tensor(values, shape).to(Dtype::Bool);
}
}  // namespace

TEST_CASE("masking: bool tensors convert to and from other dtypes") {
  Tensor m = tensor({0, 1, -2, 0.5}).to(Dtype::Bool);
  CHECK(m.dtype() == Dtype::Bool);
  check_values(m, {0, 1, 1, 1});
  check_values(m.to(Dtype::Float32), {0, 1, 1, 1});
  check_values(m.to(Dtype::Int64), {0, 1, 1, 1});
  check_values(from_vector<int32_t>({0, 3}).to(Dtype::Bool).to(Dtype::Float64), {0, 1});
  CHECK(gt(tensor({1, 5}), scalar(2)).dtype() == Dtype::Bool);
}

DEVICE_TEST_CASE("masked_fill: values, broadcasting, strided inputs") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  check_values(masked_fill(x, bools({1, 0, 0, 0, 1, 1}, {2, 3}).to(device), -1.0), {-1, 2, 3, 4, -1, -1});
  check_values(masked_fill(x, bools({0, 1, 0}).to(device), 9.0), {1, 9, 3, 4, 9, 6});      // a row mask
  check_values(masked_fill(x, bools({1, 0}, {2, 1}).to(device), 0.0), {0, 0, 0, 4, 5, 6});  // a column mask
  check_values(masked_fill(x, bools({1}, {}).to(device), 7.0).to(Dtype::Float64), {7, 7, 7, 7, 7, 7});
  check_values(masked_fill(x.transpose(0, 1), bools({1, 0}).to(device), 0.0), {0, 4, 0, 5, 0, 6});
  // The attention pattern: -inf above the diagonal.
  Tensor scores = zeros({3, 3}, Dtype::Float32, device);
  Tensor causal = gt(arange(3).to(device).unsqueeze(0), arange(3).to(device).unsqueeze(1));  // j > i
  std::vector<float> got = masked_fill(scores, causal, -std::numeric_limits<double>::infinity()).to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) CHECK((j > i ? std::isinf(got[size_t(i * 3 + j)]) && got[size_t(i * 3 + j)] < 0 : got[size_t(i * 3 + j)] == 0));
  // Integer tensors too.
  check_values(masked_fill(arange(4).to(device), bools({0, 1, 1, 0}).to(device), 42), {0, 42, 42, 3});
}

DEVICE_TEST_CASE("where: values with all three operands broadcast") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  Tensor b = tensor({-1, -2, -3}).to(device);
  check_values(where(bools({1, 0, 1, 0, 1, 0}, {2, 3}).to(device), a, b), {1, -2, 3, -1, 5, -3});
  Tensor out = where(bools({1, 0}, {2, 1}).to(device), tensor({10, 20, 30}).to(device), tensor({7}).to(device));
  CHECK(out.shape() == Shape{2, 3});
  check_values(out, {10, 20, 30, 7, 7, 7});
  // cond is the largest: [2, 1, 3] with [3] and [] -> [2, 1, 3]... and a transposed operand.
  Tensor c3 = bools({1, 0, 0, 0, 1, 1}, {2, 1, 3}).to(device);
  Tensor w = where(c3, tensor({1, 2, 3}).to(device), scalar(0).to(device));
  CHECK(w.shape() == Shape{2, 1, 3});
  check_values(w, {1, 0, 0, 0, 2, 3});
  check_values(where(bools({1, 0, 1, 0, 1, 0}, {3, 2}).to(device), a.transpose(0, 1), zeros({3, 2}).to(device)), {1, 0, 2, 0, 3, 0});
}

DEVICE_TEST_CASE("gradcheck: masked_fill and where") {
  Tensor mask = bools({1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0}, {3, 4}).to(device);
  Tensor row = bools({0, 1, 1, 0}).to(device);
  check_gradient(device, [mask](auto& in) { return masked_fill(in[0], mask, 3.0); }, {random64({3, 4}, 1)});
  check_gradient(device, [row](auto& in) { return masked_fill(in[0], row, -2.0); }, {random64({3, 4}, 2)});
  check_gradient(device, [mask](auto& in) { return masked_fill(in[0].transpose(0, 1), mask.transpose(0, 1), 0.0); },
                 {random64({3, 4}, 3)});
  check_gradient(device, [mask](auto& in) { return where(mask, in[0], in[1]); }, {random64({3, 4}, 4), random64({3, 4}, 5)});
  // Broadcast operands: gradients are summed back to each one's shape.
  check_gradient(device, [mask](auto& in) { return where(mask, in[0], in[1]); }, {random64({4}, 6), random64({3, 1}, 7)});
  check_gradient(device, [row](auto& in) { return where(row, in[0], in[1]); }, {random64({2, 1, 4}, 8), random64({3, 1}, 9)});
  check_gradient(device, [mask](auto& in) { return where(mask, in[0].narrow(1, 1, 4), in[1].transpose(0, 1)); },
                 {random64({3, 6}, 10), random64({4, 3}, 11)});
  Tensor constant = random64({3, 4}, 12).to(device);
  check_gradient(device, [mask, constant](auto& in) { return where(mask, constant, in[0]); }, {random64({3, 4}, 13)});
}

TEST_CASE("masked_fill and where: gradient is exactly 0 where not selected") {
  Tensor x = ones({4}, Dtype::Float64).requires_grad_();
  masked_fill(x, bools({1, 0, 1, 0}), 5.0).backward(tensor({2, 3, 4, 5}, {}, Dtype::Float64));
  check_values(x.grad(), {0, 3, 0, 5});
  Tensor a = ones({4}, Dtype::Float64).requires_grad_();
  Tensor b = ones({1}, Dtype::Float64).requires_grad_();
  where(bools({1, 0, 1, 0}), a, b).backward(tensor({2, 3, 4, 5}, {}, Dtype::Float64));
  check_values(a.grad(), {2, 0, 4, 0});
  check_values(b.grad(), {8});
}

TEST_CASE("masked_fill and where: errors") {
  check_error([] { masked_fill(zeros({2, 3}), zeros({2, 3}), 1.0); }, "masked_fill: mask must be a bool tensor, got float32");
  check_error([] { masked_fill(zeros({2, 3}), bools({1, 0}), 1.0); }, "masked_fill: shapes [2, 3] and [2] do not broadcast");
  check_error([] { masked_fill(zeros({3}), bools({1, 0, 1, 1, 0, 1}, {2, 3}), 1.0); },
              "masked_fill: mask of shape [2, 3] does not broadcast to x's shape [3]");
  check_error([] { where(zeros({3}), zeros({3}), zeros({3})); }, "where: cond must be a bool tensor, got float32");
  check_error([] { where(bools({1, 0, 1}), zeros({3}), zeros({3}, Dtype::Float64)); }, "where: dtypes differ (float32 and float64)");
  check_error([] { where(bools({1, 0, 1}), zeros({2}), zeros({3})); }, "where: shapes [3] and [2] do not broadcast");
}
