// cross_entropy: known values, against log_softmax + a hand-written NLL (values and gradients),
// ignore_index (including every row ignored), int32 targets, float64 gradchecks, and every error.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// -mean over counted rows of log_softmax(logits)[r, t_r], as the composition
// -sum(log_softmax(logits) * mask) / count with a one-hot mask of the counted targets.
Tensor reference_cross_entropy(const Tensor& logits, const std::vector<int64_t>& targets, int64_t ignore_index) {
  const int64_t N = logits.size(0), C = logits.size(1);
  std::vector<double> onehot(size_t(N * C), 0.0);
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r)
    if (targets[size_t(r)] != ignore_index) {
      onehot[size_t(r * C + targets[size_t(r)])] = 1.0;
      ++count;
    }
  Tensor mask = from_vector(onehot, {N, C}).to(logits.dtype()).to(logits.device());
  return sum(log_softmax(logits, 1) * mask) * (-1.0 / double(count));
}

std::vector<int64_t> random_targets(int64_t N, int64_t C, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> u = rand({N}, gen, Dtype::Float64).to_vector<double>();
  std::vector<int64_t> t;
  for (double v : u) t.push_back(std::min<int64_t>(C - 1, int64_t(v * double(C))));
  return t;
}

}  // namespace

DEVICE_TEST_CASE("cross_entropy: known values") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    Tensor logits = tensor({1, 2, 3, 1, 2, 3}, {2, 3}, dtype).to(device);
    // -log softmax([1, 2, 3]) = [2.4076059644, 1.4076059644, 0.4076059644]
    check_values(cross_entropy(logits, from_vector<int64_t>({2, 2}).to(device)), {0.4076059644}, 1e-6);
    check_values(cross_entropy(logits, from_vector<int64_t>({0, 2}).to(device)), {(2.4076059644 + 0.4076059644) / 2}, 1e-6);
    Tensor loss = cross_entropy(logits, from_vector<int64_t>({1, 0}).to(device));
    CHECK(loss.dim() == 0);
    CHECK(loss.dtype() == dtype);
    check_values(loss, {(1.4076059644 + 2.4076059644) / 2}, 1e-6);
    // Uniform logits: log C.
    check_values(cross_entropy(zeros({3, 4}, dtype, device), from_vector<int64_t>({0, 1, 3}).to(device)), {std::log(4.0)}, 1e-6);
    // Large logits stay finite.
    check_values(cross_entropy(tensor({1000, 1001, 1002}, {1, 3}, dtype).to(device), from_vector<int64_t>({0}).to(device)), {2.4076059644},
                 1e-6);
    check_values(cross_entropy(tensor({-1e4, 0, 1e4}, {1, 3}, dtype).to(device), from_vector<int64_t>({2}).to(device)), {0.0});
  }
}

DEVICE_TEST_CASE("cross_entropy: gradient is (softmax - onehot) / N") {
  Tensor logits = tensor({1, 2, 3, 0, 0, 0}, {2, 3}, Dtype::Float64).to(device).requires_grad_();
  cross_entropy(logits, from_vector<int64_t>({2, 0}).to(device)).backward();
  const double third = 1.0 / 3.0;
  check_values(logits.grad(), {0.0900305732 / 2, 0.2447284711 / 2, (0.6652409558 - 1) / 2, (third - 1) / 2, third / 2,
                               third / 2}, 1e-9);
  // An upstream gradient scales it.
  Tensor l2 = tensor({1, 2, 3}, {1, 3}, Dtype::Float64).to(device).requires_grad_();
  (cross_entropy(l2, from_vector<int64_t>({0}).to(device)) * 3.0).backward();
  check_values(l2.grad(), {3 * (0.0900305732 - 1), 3 * 0.2447284711, 3 * 0.6652409558}, 1e-9);
}

DEVICE_TEST_CASE("cross_entropy: matches log_softmax + NLL, values and gradients") {
  Generator gen(9);
  struct Case {
    int64_t N, C;
  };
  // 1000 classes: lane tails; 150 rows: several loss chunks.
  for (Case c : {Case{1, 2}, Case{37, 11}, Case{150, 7}, Case{5, 1000}}) {
    for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
      INFO("N " << c.N << " C " << c.C << " " << dtype_name(dtype));
      Tensor base = uniform({c.N, c.C}, -6, 6, gen, dtype).to(device);
      std::vector<int64_t> t = random_targets(c.N, c.C, 100 + uint64_t(c.N));
      for (int64_t ignore : {int64_t(-100), t[0]}) {  // also ignore every row that targets class t[0]
        Tensor a = base.clone().detach().requires_grad_();
        Tensor b = base.clone().detach().requires_grad_();
        bool any_counted = false;
        for (int64_t v : t) any_counted = any_counted || v != ignore;
        Tensor fused = cross_entropy(a, from_vector(t).to(device), ignore);
        if (!any_counted) {
          check_values(fused, {0.0});
          continue;
        }
        Tensor ref = reference_cross_entropy(b, t, ignore);
        const double tol = dtype == Dtype::Float64 ? 1e-12 : 1e-5;
        check_close(fused, ref, tol);
        (fused * 1.7).backward();
        (ref * 1.7).backward();
        check_close(a.grad(), b.grad(), tol);
      }
    }
  }
}

DEVICE_TEST_CASE("cross_entropy: ignore_index leaves rows out of the mean and the gradient") {
  Tensor logits = tensor({1, 2, 3, 5, 5, 5, 3, 2, 1}, {3, 3}, Dtype::Float64).to(device).requires_grad_();
  // Row 0 [1, 2, 3] -> 2: 0.4076; row 2 [3, 2, 1] -> 1: 1.4076; row 1 ignored.
  Tensor loss = cross_entropy(logits, from_vector<int64_t>({2, -100, 1}).to(device));
  check_values(loss, {(0.4076059644 + 1.4076059644) / 2}, 1e-9);
  loss.backward();
  std::vector<double> g = logits.grad().to_vector<double>();
  CHECK(g[3] == 0.0);
  CHECK(g[4] == 0.0);
  CHECK(g[5] == 0.0);
  CHECK(g[2] == doctest::Approx((0.6652409558 - 1) / 2).epsilon(1e-9));
  // A custom ignore_index; it may also be a valid class.
  check_values(cross_entropy(logits.detach(), from_vector<int64_t>({2, 7, 1}).to(device), 7), {(0.4076059644 + 1.4076059644) / 2},
               1e-9);
  check_values(cross_entropy(logits.detach(), from_vector<int64_t>({2, 1, 0}).to(device), 0), {(0.4076059644 + std::log(3.0)) / 2},
               1e-9);
}

DEVICE_TEST_CASE("cross_entropy: every row ignored gives 0 and zero gradients") {
  Tensor logits = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device).requires_grad_();
  Tensor loss = cross_entropy(logits, from_vector<int64_t>({-100, -100}).to(device));
  check_values(loss, {0.0});
  loss.backward();
  check_values(logits.grad(), {0, 0, 0, 0, 0, 0});
  // No rows at all: the same.
  Tensor empty = zeros({0, 3}, Dtype::Float32, device).requires_grad_();
  Tensor l0 = cross_entropy(empty, zeros({0}, Dtype::Int64, device));
  check_values(l0, {0.0});
  l0.backward();
  CHECK(empty.grad().shape() == Shape{0, 3});
}

DEVICE_TEST_CASE("cross_entropy: int32 targets and non-contiguous logits") {
  Generator gen(12);
  Tensor logits = uniform({6, 5}, -3, 3, gen).to(device);
  std::vector<int64_t> t = random_targets(6, 5, 13);
  std::vector<int32_t> t32(t.begin(), t.end());
  check_close(cross_entropy(logits, from_vector(t32).to(device)), cross_entropy(logits, from_vector(t).to(device)), 0);
  Tensor transposed = logits.transpose(0, 1).contiguous().transpose(0, 1);
  REQUIRE_FALSE(transposed.is_contiguous());
  check_close(cross_entropy(transposed, from_vector(t).to(device)), cross_entropy(logits, from_vector(t).to(device)), 0);
}

TEST_CASE("cross_entropy: the loss does not depend on the thread count") {
  Generator gen(14);
  // float64, so that a different summation order would show in the last bits.
  Tensor logits = uniform({3000, 17}, -5, 5, gen, Dtype::Float64);
  Tensor targets = from_vector(random_targets(3000, 17, 15));
  const int saved = num_threads();
  set_num_threads(1);
  double one = cross_entropy(logits, targets).item<double>();
  set_num_threads(3);
  double three = cross_entropy(logits, targets).item<double>();
  set_num_threads(saved);
  CHECK(one == three);
}

DEVICE_TEST_CASE("gradcheck: cross_entropy") {
  auto logits = random64({5, 4}, 60, -3, 3);
  Tensor t = from_vector<int64_t>({3, 0, -100, 1, 3}).to(device);
  check_gradient(device, [t](auto& in) { return cross_entropy(in[0], t); }, {logits.clone()});
  check_gradient(device, [device](auto& in) { return cross_entropy(in[0], from_vector<int64_t>({3, 0, 2, 1, 3}).to(device), 3); },
                 {logits.clone()});
  // Non-contiguous logits: [C, N] transposed.
  check_gradient(device, [t](auto& in) { return cross_entropy(in[0].transpose(0, 1), t); }, {random64({4, 5}, 61, -3, 3)});
  // Composed: the loss scaled by another input's sum, so the incoming gradient is not 1.
  check_gradient(device, [t](auto& in) { return cross_entropy(in[0], t) * sum(in[1]); },
                 {logits.clone(), random64({3}, 62)});
}

TEST_CASE("cross_entropy: errors name the op, the shapes and the bad value") {
  Tensor logits = zeros({4, 5});
  check_error([&] { cross_entropy(logits, from_vector<int64_t>({0, 1, 2, 7})); },
              "cross_entropy: target 7 at row 3 is out of range for 5 classes (logits [4, 5]");
  check_error([&] { cross_entropy(logits, from_vector<int64_t>({0, -1, 2, 3})); },
              "cross_entropy: target -1 at row 1 is out of range for 5 classes");
  check_error([&] { cross_entropy(logits, from_vector<int32_t>({5, 0, 0, 0})); },
              "cross_entropy: target 5 at row 0 is out of range for 5 classes");
  check_error([&] { cross_entropy(logits, from_vector<int64_t>({0, 1, 2})); },
              "cross_entropy: targets [3] do not match logits [4, 5]: expected 1-D targets of length 4");
  check_error([&] { cross_entropy(logits, zeros({4, 1}, Dtype::Int64)); },
              "cross_entropy: targets [4, 1] do not match logits [4, 5]");
  check_error([&] { cross_entropy(logits, zeros({4})); }, "cross_entropy: targets must be int32 or int64, got float32");
  check_error([] { cross_entropy(zeros({2, 3, 4}), zeros({2}, Dtype::Int64)); },
              "cross_entropy: logits must be 2-D [N, C], got [2, 3, 4]");
  check_error([] { cross_entropy(zeros({5}), zeros({5}, Dtype::Int64)); },
              "cross_entropy: logits must be 2-D [N, C], got [5]");
  check_error([] { cross_entropy(zeros({2, 3}, Dtype::Int64), zeros({2}, Dtype::Int64)); },
              "cross_entropy: logits must be float32 or float64, got int64");
  check_error([] { cross_entropy(Tensor(), zeros({2}, Dtype::Int64)); }, "cross_entropy: an input tensor is undefined");
}
