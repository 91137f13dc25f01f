// Element-wise ops: values against known numbers, broadcasting, and float64 gradchecks
// (including broadcast and non-contiguous inputs).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/unary_math.h"
#include "tests/helpers.h"
#include "tests/unary_cases.h"

using namespace ember;
using namespace ember::testing;

DEVICE_TEST_CASE("elementwise: binary ops broadcast like NumPy") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(device);
  Tensor b = tensor({10, 20, 30}).to(device);
  Tensor c = tensor({100, 200}, {2, 1}).to(device);
  check_values(a + b, {11, 22, 33, 14, 25, 36});
  check_values(a - c, {-99, -98, -97, -196, -195, -194});
  check_values(a * b, {10, 40, 90, 40, 100, 180});
  check_values(a / tensor({2}).to(device), {0.5, 1, 1.5, 2, 2.5, 3});
  check_values(b + c, {110, 120, 130, 210, 220, 230});
  check_values(a * 2.0 + 1.0, {3, 5, 7, 9, 11, 13});
  check_values(1.0 - a, {0, -1, -2, -3, -4, -5});
  check_values(6.0 / a, {6, 3, 2, 1.5, 1.2, 1});
  check_values(a.transpose(0, 1) + tensor({1, 2}).to(device), {2, 6, 3, 7, 4, 8});
  check_values(eq(a, tensor({1, 0, 3}).to(device)), {1, 0, 1, 0, 0, 0});
  check_values(gt(a, scalar(3, Dtype::Float32, device)), {0, 0, 0, 1, 1, 1});
  check_values(lt(a, scalar(3, Dtype::Float32, device)), {1, 1, 0, 0, 0, 0});
  CHECK((a + b).device() == device);
}

TEST_CASE("elementwise: errors name the op and the shapes") {
  check_error([] { zeros({2, 3}) + zeros({4}); }, "add: shapes [2, 3] and [4] do not broadcast");
  check_error([] { zeros({2}) * zeros({2}, Dtype::Float64); }, "mul: dtypes differ (float32 and float64)");
  check_error([] { exp(arange(3)); }, "exp: expected a floating tensor");
}

DEVICE_TEST_CASE("elementwise: unary ops against known values") {
  Tensor x = tensor({-1.0, 0.5, 2.0}, {}, Dtype::Float64).to(device);
  check_values(neg(x), {1, -0.5, -2});
  check_values(exp(x), {0.36787944117, 1.6487212707, 7.3890560989});
  check_values(log(tensor({1.0, 2.718281828459045, 10.0}, {}, Dtype::Float64).to(device)), {0, 1, 2.302585093});
  check_values(sqrt(tensor({4.0, 2.0}, {}, Dtype::Float64).to(device)), {2, 1.41421356237});
  check_values(rsqrt(tensor({4.0, 0.25}, {}, Dtype::Float64).to(device)), {0.5, 2});
  check_values(tanh(x), {-0.76159415595, 0.46211715726, 0.96402758007});
  check_values(sigmoid(x), {0.26894142137, 0.62245933120, 0.88079707798});
  check_values(relu(x), {0, 0.5, 2});
  // GELU (erf form), values from x * Phi(x).
  check_values(gelu(x), {-0.15865525393, 0.34573123063, 1.95449973610});
  check_values(abs(x), {1, 0.5, 2});
  // softplus: log(1 + e^x); large inputs must not overflow.
  check_values(softplus(tensor({-1.0, 0.0, 2.0, 100.0, -100.0}, {}, Dtype::Float64).to(device)),
               {0.31326168752, 0.69314718056, 2.12692801104, 100.0, 3.720075976e-44});
  check_values(pow(tensor({2.0, 3.0}, {}, Dtype::Float64).to(device), 3.0), {8, 27});
  check_values(pow(tensor({4.0}, {}, Dtype::Float64).to(device), -0.5), {0.5});
  CHECK(exp(x).device() == device);
}

DEVICE_TEST_CASE("gradcheck: unary ops") {
  auto x = random64({3, 4}, 1);
  auto positive = random64({3, 4}, 2, 0.5, 2.0);
  // Keep relu and abs away from their kink at 0.
  auto away_from_zero = random64({3, 4}, 3, 0.1, 1.0) * random64({3, 4}, 4).to(Dtype::Float64);
  check_gradient(device, [](auto& in) { return neg(in[0]); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return exp(in[0]); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return log(in[0]); }, {positive.clone().detach()});
  check_gradient(device, [](auto& in) { return sqrt(in[0]); }, {positive.clone().detach()});
  check_gradient(device, [](auto& in) { return rsqrt(in[0]); }, {positive.clone().detach()});
  check_gradient(device, [](auto& in) { return tanh(in[0]); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return sigmoid(in[0]); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return gelu(in[0] * 3.0); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return pow(in[0], 2.5); }, {positive.clone().detach()});
  check_gradient(device, [](auto& in) { return softplus(in[0] * 4.0); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return 1.0 / in[0]; }, {positive.clone().detach()});
  Tensor kinked = tensor({-0.7, -0.2, 0.3, 0.9, -1.5, 2.0}, {2, 3}, Dtype::Float64);
  check_gradient(device, [](auto& in) { return relu(in[0]); }, {kinked.clone()});
  check_gradient(device, [](auto& in) { return abs(in[0]); }, {kinked.clone()});
}

TEST_CASE("elementwise: each unary op keeps for backward only what its derivative reads") {
  // The graph of sum(op(2 x)) holds the intermediate a = 2 x if op's derivative reads its input, and
  // op(a) if it reads its output: 4 KiB each here (1024 floats), nothing else (the scaling by 2 reads
  // neither, sum keeps shapes). Before, every unary op kept both its input and its output.
  Generator gen(3);
  Tensor x = uniform({1024}, 0.5, 2.0, gen).requires_grad_();
  const int64_t block = 1024 * 4;
  for (const UnaryCase& c : every_unary_op()) {
    INFO(std::string(c.name));
    const int input = c.reads == math::Reads::Input, output = c.reads == math::Reads::Output;
    (void)sum(c.op(x * 2.0));  // once before measuring: lazily made buffers (a thread's scratch) are not the graph's
    // NOTE: with free blocks cached, a request may get a larger cached block, counted at its size.
    allocator_for(Device::cpu()).release_cached();
    const int64_t before = memory_stats().allocated;
    Tensor loss = sum(c.op(x * 2.0));
    const int64_t held = memory_stats().allocated - before;  // what the graph keeps, and the loss (a few bytes)
    INFO("the graph holds " << held << " bytes");
    CHECK(held / block == input + output);
    CHECK(held % block < 256);
    x.zero_grad();
    loss.backward();  // and the gradient it gives is still the derivative
    Tensor x64 = x.detach().to(Dtype::Float64).requires_grad_();
    sum(c.op(x64 * 2.0)).backward();
    check_close(x.grad(), x64.grad(), 1e-5);
  }
}

TEST_CASE("elementwise: pow at 0 and below 0 follows PyTorch's conventions, values and derivatives") {
  // (x, exponent, x^e, d/dx) as PyTorch 1.13 gives them (torch.tensor([x]).pow(e) and its backward, the
  // same in float64 and float32). d/dx x^0 = 0 even at x = 0 (it was NaN: 0 * 0^-1); d/dx x^1 = 1 at 0.
  // (At x = -0 with e = 0.5, PyTorch computes sqrt and gives -0 and -inf where std::pow gives 0 and inf.)
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    double x, e, value, grad;
  };
  const std::vector<Case> cases = {
      {0, 0, 1, 0},          {0, 1, 0, 1},         {0, 2, 0, 0},        {0, 0.5, 0, inf},     {0, 1.5, 0, 0},
      {0, -1, inf, -inf},    {0, -0.5, inf, -inf}, {-0.0, -1, -inf, -inf}, {-0.0, -2, inf, inf}, {-2, 3, -8, 12},
      {-2, 2, 4, -4},        {-2, 0.5, nan, nan},  {-2, -1, -0.5, -0.25}, {-2, -2, 0.25, 0.25}, {-2, 0, 1, 0},
      {2, 0, 1, 0},          {3, 1, 3, 1},         {nan, 0, 1, 0},      {inf, 0, 1, 0},       {4, -0.5, 0.5, -0.0625},
      {2, 2.5, 5.656854249492381, 7.0710678118654755}};
  auto same = [](double got, double want) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::abs(got - want) <= 1e-6 * (1 + std::abs(want));
  };
  for (Dtype dtype : {Dtype::Float64, Dtype::Float32}) {
    for (const Case& c : cases) {
      INFO(dtype_name(dtype) << " pow(" << c.x << ", " << c.e << ")");
      Tensor x = tensor({c.x}, {}, dtype).requires_grad_();
      Tensor y = pow(x, c.e);
      y.backward(ones({1}, dtype));
      const double value = y.detach().to_vector<double>()[0], grad = x.grad().to_vector<double>()[0];
      INFO("got " << value << " and d/dx " << grad << ", PyTorch " << c.value << " and " << c.grad);
      CHECK(same(value, c.value));
      CHECK(same(grad, c.grad));
    }
  }
}

TEST_CASE("gradcheck: every unary op on transposed and broadcast inputs, and reaching it through a broadcast") {
  // What each op keeps for backward depends on what its derivative reads (core/unary_math.h), and an op
  // that reads neither is handed the gradient itself as a stand-in: here a stride-0 view (sum's backward).
  using Unary = std::function<Tensor(const Tensor&)>;
  std::vector<std::pair<std::string, Unary>> ops;
  for (const UnaryCase& c : every_unary_op()) ops.emplace_back(c.name, c.op);
  // pow's exponents with their own rules at x^(e - 1) (core/unary_math.h).
  for (double e : {2.5, 0.0, 1.0, -2.0})
    ops.emplace_back("pow " + std::to_string(e), [e](const Tensor& a) { return pow(a, e); });
  Tensor x = random64({4, 3}, 61, 0.3, 1.7);  // positive and away from 0: log, sqrt, rsqrt, pow, relu, abs
  Tensor row = random64({3}, 62, 0.3, 1.7);
  for (const auto& [name, op] : ops) {
    INFO(name);
    check_gradient([op = op](auto& in) { return op(in[0].transpose(0, 1)); }, {x.clone()});
    check_gradient([op = op](auto& in) { return sum(op(in[0] * in[1]), {0}); }, {x.clone(), row.clone()});
  }
}

DEVICE_TEST_CASE("gradcheck: binary ops with broadcasting and non-contiguous inputs") {
  auto a = random64({3, 4}, 10);
  auto b = random64({4}, 11, 0.5, 1.5);
  auto c = random64({3, 1}, 12, 0.5, 1.5);
  auto t = random64({4, 3}, 13);
  check_gradient(device, [](auto& in) { return in[0] + in[1]; }, {a.clone(), b.clone()});
  check_gradient(device, [](auto& in) { return in[0] - in[1]; }, {a.clone(), c.clone()});
  check_gradient(device, [](auto& in) { return in[0] * in[1]; }, {a.clone(), b.clone()});
  check_gradient(device, [](auto& in) { return in[0] / in[1]; }, {a.clone(), c.clone()});
  check_gradient(device, [](auto& in) { return in[1] / in[0]; }, {b.clone(), a.clone()});
  // Transposed (non-contiguous) and sliced operands.
  check_gradient(device, [](auto& in) { return in[0].transpose(0, 1) * in[1]; }, {t.clone(), a.clone()});
  check_gradient(device, [](auto& in) { return in[0].narrow(1, 1, 2) + in[1].transpose(0, 1).slice(1, 0, 2); }, {a.clone(), t.clone()});
  // The same tensor used twice: gradients accumulate.
  check_gradient(device, [](auto& in) { return in[0] * in[0] + in[0]; }, {a.clone()});
}

DEVICE_TEST_CASE("gradcheck: views") {
  auto x = random64({2, 3, 4}, 20);
  check_gradient(device, [](auto& in) { return in[0].view({6, 4}) * 2.0; }, {x.clone()});
  check_gradient(device, [](auto& in) { return in[0].permute({2, 0, 1}) * 1.5; }, {x.clone()});
  check_gradient(device, [](auto& in) { return in[0].transpose(0, 2).reshape({24}) * 1.5; }, {x.clone()});
  check_gradient(device, [](auto& in) { return in[0].narrow(2, 1, 2) * 3.0; }, {x.clone()});
  check_gradient(device, [](auto& in) { return in[0].select(1, 2) * 3.0; }, {x.clone()});
  check_gradient(device, [](auto& in) { return in[0].unsqueeze(1).squeeze(1) * 3.0; }, {x.clone()});
  auto row = random64({1, 4}, 21);
  check_gradient(device, [](auto& in) { return in[0].expand({3, 4}) * in[1]; }, {row.clone(), random64({3, 4}, 22)});
  check_gradient(device, [](auto& in) { return in[0].to(Dtype::Float32).to(Dtype::Float64) * 1.0; }, {row.clone()},
                 {1e-3, 1e-3, 1e-3});
}

TEST_CASE("elementwise: float32 GELU keeps a small relative error over the whole range, the tails included") {
  // Every 1e-4 over [-14, 20], against float64 (glibc's erfc, accurate to ~1e-16 relative in the tails).
  // The relative error is what matters where gelu(x) is tiny (x << 0): the Abramowitz-Stegun erf used
  // before gave 1.9e-4 at x = -3.45, 5% at -5 and 100% below -5.5 (1 + erf(x) rounded to 0), as does
  // PyTorch 1.13's float32 GELU (measured: 2.0e-4 at -3.45, 100% below -5.54). Where the result is
  // subnormal (x < -13.2) the same relative bound holds, plus one subnormal step of rounding.
  double worst_gelu = 0, worst_gelu_at = 0, worst_dgelu = 0, worst_dgelu_at = 0, worst_subnormal = 0;
  for (int i = -140000; i <= 200000; ++i) {
    const float x = float(i) * 1e-4f;
    const double xd = double(x);
    const double cdf = 0.5 * std::erfc(-xd * M_SQRT1_2);
    const double gelu = xd * cdf;
    const double dgelu = cdf + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    const double got = double(math::Gelu{}.f(x)), got_d = double(math::Gelu{}.df(x, 0.0f));
    if (std::abs(gelu) >= double(std::numeric_limits<float>::min())) {
      const double rel = std::abs(got - gelu) / std::abs(gelu);
      if (rel > worst_gelu) worst_gelu = rel, worst_gelu_at = xd;
    } else {
      worst_subnormal = std::max(worst_subnormal, (std::abs(got - gelu) - 5e-6 * std::abs(gelu)) /
                                                      double(std::numeric_limits<float>::denorm_min()));
    }
    // gelu' crosses 0 at x = -0.75179...: near there only an absolute error (of its O(0.2) terms) means
    // something, hence the floor of 0.05 under the relative error.
    if (std::abs(dgelu) >= double(std::numeric_limits<float>::min())) {
      const double rel = std::abs(got_d - dgelu) / std::max(std::abs(dgelu), 0.05);
      if (rel > worst_dgelu) worst_dgelu = rel, worst_dgelu_at = xd;
    }
  }
  INFO("worst relative errors: gelu " << worst_gelu << " at " << worst_gelu_at << ", gelu' " << worst_dgelu << " at "
                                      << worst_dgelu_at << "; subnormal results: " << worst_subnormal
                                      << " steps beyond 5e-6 relative");
  CHECK(worst_gelu < 5e-6);
  CHECK(worst_dgelu < 5e-6);
  CHECK(worst_subnormal <= 1);
  // The point, x = -3.45, and a far tail.
  for (double xd : {-3.45, -5.0, -8.0, -12.0}) {
    const double want = xd * 0.5 * std::erfc(-xd * M_SQRT1_2);
    INFO("x = " << xd);
    CHECK(std::abs(double(math::Gelu{}.f(float(xd))) - want) <= 5e-6 * std::abs(want));
  }
  // Limits: gelu(inf) = inf, NaN stays NaN, and very negative x give -0 (not NaN); Phi at the ends and at 0.
  CHECK(math::Gelu{}.f(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(math::Gelu{}.f(-1e30f) == 0.0f);
  CHECK(math::Gelu{}.df(-1e30f, 0.0f) == 0.0f);
  CHECK(std::isnan(math::Gelu{}.f(std::numeric_limits<float>::quiet_NaN())));
  CHECK(math::normal_cdf(0.0f) == doctest::Approx(0.5).epsilon(1e-7));
  CHECK(math::normal_cdf(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(math::normal_cdf(std::numeric_limits<float>::infinity()) == 1.0f);
  // The tensor op takes the same float path (the vectorised loop): float32 gelu against float64 gelu, relative,
  // over [-12, 12] (all normal results).
  Tensor x = uniform({20000}, -12, 12, default_generator(), Dtype::Float64);
  std::vector<double> got = gelu(x.to(Dtype::Float32)).to_vector<double>(), want = gelu(x).to_vector<double>();
  std::vector<double> xs = x.to(Dtype::Float32).to_vector<double>();  // the float inputs, exactly
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = xs[i] * 0.5 * std::erfc(-xs[i] * M_SQRT1_2);
    INFO("x = " << xs[i] << ": float32 " << got[i] << ", float64 " << want[i]);
    CHECK(std::abs(got[i] - w) <= 5e-6 * std::abs(w));
  }
}

// softplus is the op docs/adding-an-op.md adds step by step; this is the test that walkthrough quotes.
TEST_CASE("softplus: values, large inputs, and gradients on plain, broadcast and strided inputs") {
  // log(1 + e^x) by hand: log 2 = 0.693147..., log(1 + e^2) = 2.126928..., and for large |x|
  // softplus(x) = x (x >> 0) or e^x (x << 0), where a naive log(1 + exp(x)) gives inf or 0.
  check_values(softplus(tensor({-1.0, 0.0, 2.0, 100.0, -100.0}, {}, Dtype::Float64)),
               {0.31326168752, 0.69314718056, 2.12692801104, 100.0, 3.720075976e-44});
  check_values(softplus(tensor({1000.0, -1000.0})), {1000.0, 0.0});  // float32: still finite
  // d/dx softplus = sigmoid(x): at 0 it is exactly 1/2.
  Tensor zero = tensor({0.0}, {}, Dtype::Float64).requires_grad_();
  softplus(zero).backward(ones({1}, Dtype::Float64));
  check_values(zero.grad(), {0.5});
  // Float64 finite differences against the backward: plain, broadcast into a sum, transposed view.
  Tensor x = random64({3, 4}, 21, -4.0, 4.0), row = random64({4}, 22, -4.0, 4.0);
  check_gradient([](auto& in) { return softplus(in[0]); }, {x.clone()});
  check_gradient([](auto& in) { return softplus(in[0] + in[1]); }, {x.clone(), row.clone()});
  check_gradient([](auto& in) { return softplus(in[0].transpose(0, 1)); }, {x.clone()});
}
