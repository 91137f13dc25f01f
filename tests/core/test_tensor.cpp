// Tensor core: creation, dtypes, views without copies, contiguity, printing, random generators.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/print.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("tensor: creation functions give the expected values, shapes and dtypes") {
  check_values(zeros({2, 3}), {0, 0, 0, 0, 0, 0});
  check_values(ones({2}, Dtype::Float64), {1, 1});
  check_values(full({3}, 2.5), {2.5, 2.5, 2.5});
  check_values(arange(5), {0, 1, 2, 3, 4});
  check_values(arange(2, 11, 3), {2, 5, 8});
  check_values(arange(5, 0, -2), {5, 3, 1});
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Strides{3, 1});
  CHECK(t.dtype() == Dtype::Float32);
  CHECK(arange(3).dtype() == Dtype::Int64);
  CHECK(from_vector(std::vector<int32_t>{1, 2}).dtype() == Dtype::Int32);
  CHECK(scalar(3.0).dim() == 0);
  CHECK(scalar(3.0).item<float>() == 3.0f);
  CHECK(t.device() == Device::cpu());
}

DEVICE_TEST_CASE("tensor: views share storage and copy nothing") {
  Tensor t = tensor({0, 1, 2, 3, 4, 5}, {2, 3}).to(device);
  Tensor tt = t.transpose(0, 1);
  CHECK(tt.shape() == Shape{3, 2});
  CHECK(tt.strides() == Strides{1, 3});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.raw_data() == t.raw_data());
  CHECK(tt.device() == device);
  check_values(tt, {0, 3, 1, 4, 2, 5});
  check_values(t.narrow(1, 1, 2), {1, 2, 4, 5});
  check_values(t.slice(1, -2, 3), {1, 2, 4, 5});
  check_values(t.select(0, 1), {3, 4, 5});
  check_values(t.view({3, 2}), {0, 1, 2, 3, 4, 5});
  check_values(t.view({-1}), {0, 1, 2, 3, 4, 5});
  check_values(t.permute({1, 0}).contiguous(), {0, 3, 1, 4, 2, 5});
  CHECK(t.unsqueeze(0).shape() == Shape{1, 2, 3});
  CHECK(t.unsqueeze(-1).shape() == Shape{2, 3, 1});
  CHECK(t.unsqueeze(1).squeeze(1).shape() == Shape{2, 3});
  Tensor row = tensor({1, 2, 3}).to(device).unsqueeze(0);
  Tensor wide = row.expand({4, 3});
  CHECK(wide.strides()[0] == 0);
  check_values(wide, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  // A view writes through to its base.
  {
    Tensor base = zeros({2, 3}, Dtype::Float32, device);
    base.narrow(1, 1, 1).fill_(7);
    check_values(base, {0, 7, 0, 0, 7, 0});
  }
  // reshape of a non-viewable layout copies.
  Tensor r = tt.reshape({6});
  check_values(r, {0, 3, 1, 4, 2, 5});
  CHECK(r.raw_data() != t.raw_data());
}

TEST_CASE("tensor: view refuses layouts that need a copy, and bad views are clear errors") {
  Tensor t = tensor({0, 1, 2, 3, 4, 5}, {2, 3});
  check_error([&] { t.transpose(0, 1).view({6}); }, "without a copy");
  check_error([&] { t.view({4, 2}); }, "does not hold 6 elements");
  check_error([&] { t.narrow(1, 2, 2); }, "outside dim 1 of size 3");
  check_error([&] { t.permute({0, 0}); }, "appears twice");
  check_error([&] { t.expand({2, 4}); }, "cannot expand");
  check_error([&] { t.transpose(0, 2); }, "dim 2 out of range");
  check_error([&] { t.item<float>(); }, "6 elements");
  check_error([&] { t.data<double>(); }, "holds float32");
}

// A 0-d tensor has the dims 0 and -1 (like PyTorch): transposing them is the tensor itself. (It
// wrote through an empty dims list and crashed, softmax of a 0-d GPU tensor with it.)
DEVICE_TEST_CASE("tensor: a 0-d tensor transposes to itself, and its gradient flows back") {
  Tensor s = scalar(3.0, Dtype::Float64, device).requires_grad_();
  Tensor t = s.transpose(0, -1);
  CHECK(t.shape() == Shape{});
  check_values(t, {3});
  (t * 2.0).backward();
  check_values(s.grad(), {2});
  check_error([&] { s.transpose(0, 1); }, "transpose: dim 1 out of range for a tensor with 0 dims");
}

TEST_CASE("tensor: dtype conversion and copy_ with broadcast") {
  Tensor t = tensor({1.7, -2.2, 3.0});
  check_values(t.to(Dtype::Int64), {1, -2, 3});
  check_values(t.to(Dtype::Float64), {1.7, -2.2, 3.0});
  Tensor dst = zeros({2, 3});
  dst.copy_(t);
  check_values(dst, {1.7, -2.2, 3.0, 1.7, -2.2, 3.0});
  dst.add_(ones({3}), 2.0);
  check_values(dst, {3.7, -0.2, 5.0, 3.7, -0.2, 5.0});
  dst.mul_(2.0);
  check_values(dst, {7.4, -0.4, 10.0, 7.4, -0.4, 10.0});
}

TEST_CASE("tensor: printing shows values, shape, dtype and device, abbreviated when large") {
  std::string s = tensor({1, 2, 3, 4}, {2, 2}).str();
  CHECK(s == "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]], shape=[2, 2], dtype=float32, device=cpu)");
  CHECK(arange(3).str() == "tensor([0, 1, 2], shape=[3], dtype=int64, device=cpu)");
  std::string big = zeros({2000}).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 200);
  CHECK(fmt::format("{}", scalar(1.5)) == "tensor(1.5000, shape=[], dtype=float32, device=cpu)");
}

TEST_CASE("random: same seed gives the same numbers, whatever the thread count") {
  int saved = num_threads();
  set_num_threads(1);
  Generator g1(42);
  Tensor a = randn({100000}, g1);
  set_num_threads(2);
  Generator g2(42);
  Tensor b = randn({100000}, g2);
  set_num_threads(saved);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  Generator g3(43);
  CHECK(randn({10}, g3).to_vector<float>() != randn({10}, g2).to_vector<float>());
  // Moments of the distributions.
  double m = mean(a).item<float>(), v = var(a).item<float>();
  CHECK(std::abs(m) < 0.02);
  CHECK(std::abs(v - 1.0) < 0.02);
  Generator g4(7);
  Tensor u = uniform({100000}, 2.0, 4.0, g4);
  CHECK(std::abs(mean(u).item<float>() - 3.0) < 0.02);
  CHECK(max(u).item<float>() < 4.0f);
  CHECK(max(-u).item<float>() <= -2.0f);
}

TEST_CASE("device: parsing and clear errors without CUDA") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("cuda").str() == "cuda:0");
  check_error([] { Device::parse("gpu"); }, "unknown device 'gpu'");
  check_error([] { Device::parse("cuda:x"); }, "unknown device");
}
