// Reductions: sum, mean, max, var, argmax over any dims with keepdim; sum_to; gradchecks.
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

DEVICE_TEST_CASE("reduce: sum, mean, max over dims with keepdim") {
  Tensor x = arange(24, Dtype::Float32).reshape({2, 3, 4}).to(device);
  check_values(sum(x), {276});
  check_values(sum(x, {0}), {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  check_values(sum(x, {1}), {12, 15, 18, 21, 48, 51, 54, 57});
  check_values(sum(x, {2}), {6, 22, 38, 54, 70, 86});
  check_values(sum(x, {0, 2}), {60, 92, 124});
  check_values(sum(x, {-1, 0}), {60, 92, 124});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  CHECK(sum(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  check_values(mean(x, {2}), {1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
  check_values(max(x, {1}), {8, 9, 10, 11, 20, 21, 22, 23});
  check_values(max(-x, {0, 2}), {0, -4, -8});
  check_values(argmax(tensor({1, 5, 2, 7, 0, 3}, {2, 3}).to(device), 1), {1, 0});
  check_values(argmax(tensor({1, 5, 2, 7, 0, 3}, {2, 3}).to(device), 0), {1, 0, 1});
  // Argmax over a middle dim and the first of a 3-D tensor (strided on the CPU, moved to rows on a GPU),
  // ties going to the first index: t[i, j, k] of shape [2, 3, 2].
  Tensor t3 = tensor({1, 9, 4, 9, 4, 0, /**/ 2, 2, 2, 7, 8, 7}, {2, 3, 2}).to(device);
  check_values(argmax(t3, 1), {1, 0, 2, 1});
  check_values(argmax(t3, 0), {1, 0, 0, 0, 1, 1});
  CHECK(argmax(t3, 1, true).shape() == Shape{2, 1, 2});
  // Reductions of non-contiguous inputs.
  check_values(sum(x.transpose(0, 2), {0}), {6, 54, 22, 70, 38, 86});  // [3, 2]: (j, k) = sum_i x[k, j, i]
  // Long rows (the vectorised path) against a closed form.
  Tensor big = arange(100001, Dtype::Float64).to(device);
  check_values(sum(big), {100000.0 * 100001.0 / 2});
  CHECK(sum(x, {1}).device() == device);
}

DEVICE_TEST_CASE("reduce: var matches the textbook formula") {
  Tensor x = tensor({2, 4, 4, 4, 5, 5, 7, 9}).to(device);
  check_values(var(x, {}, false, 0), {4.0});
  check_values(var(x), {32.0 / 7.0});
  Tensor m = tensor({1, 2, 3, 4, 6, 8}, {2, 3}).to(device);
  check_values(var(m, {1}), {1, 4});
  check_error([] { var(tensor({1}), {}, false, 1); }, "no degrees of freedom");
  check_error([] { sum(zeros({2, 3}), {0, 0}); }, "repeated");
  check_error([] { sum(zeros({2, 3}), {2}); }, "dim 2 out of range");
}

DEVICE_TEST_CASE("reduce: sum_to undoes broadcasting") {
  Tensor g = ones({2, 3, 4}, Dtype::Float32, device);
  check_values(sum_to(g, {4}), {6, 6, 6, 6});
  check_values(sum_to(g, {3, 1}), {8, 8, 8});
  check_values(sum_to(g, {2, 1, 1}), {12, 12});
  check_error([&] { sum_to(g, {5}); }, "does not broadcast");
}

DEVICE_TEST_CASE("gradcheck: reductions") {
  auto x = random64({3, 4, 5}, 30);
  check_gradient(device, [](auto& in) { return sum(in[0]); }, {x.clone()});
  check_gradient(device, [](auto& in) { return sum(in[0], {1}); }, {x.clone()});
  check_gradient(device, [](auto& in) { return sum(in[0], {0, 2}, true); }, {x.clone()});
  check_gradient(device, [](auto& in) { return mean(in[0], {2}); }, {x.clone()});
  check_gradient(device, [](auto& in) { return mean(in[0].transpose(0, 1), {0}); }, {x.clone()});
  check_gradient(device, [](auto& in) { return max(in[0], {1}); }, {x.clone()});
  check_gradient(device, [](auto& in) { return max(in[0], {0, 2}, true); }, {x.clone()});
  check_gradient(device, [](auto& in) { return var(in[0], {2}); }, {x.clone()});
  check_gradient(device, [](auto& in) { return var(in[0], {0, 1}, true, 0); }, {x.clone()});
  check_gradient(device, [](auto& in) { return sum_to(in[0], {4, 1}); }, {x.clone()});
}
