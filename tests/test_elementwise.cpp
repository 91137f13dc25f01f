// Element-wise ops: values against known numbers, broadcasting, and float64 gradchecks
// (including broadcast and non-contiguous inputs).
#include <limits>

#include "core/unary_math.h"
#include "helpers.h"

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

TEST_CASE("elementwise: the vectorised float erf and GELU match the float64 library versions") {
  double worst_erf = 0, worst_gelu = 0, worst_dgelu = 0;
  for (int i = -100000; i <= 100000; ++i) {
    float x = float(i) * 1e-4f;  // [-10, 10]
    double xd = double(x);
    worst_erf = std::max(worst_erf, std::abs(double(math::erf_vec(x)) - std::erf(xd)));
    double gelu = 0.5 * xd * (1 + std::erf(xd * M_SQRT1_2));
    double dgelu = 0.5 * (1 + std::erf(xd * M_SQRT1_2)) + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    worst_gelu = std::max(worst_gelu, std::abs(double(math::Gelu{}.f(x)) - gelu) / (1 + std::abs(gelu)));
    worst_dgelu = std::max(worst_dgelu, std::abs(double(math::Gelu{}.df(x, 0.0f)) - dgelu));
  }
  INFO("worst errors: erf " << worst_erf << ", gelu " << worst_gelu << ", gelu' " << worst_dgelu);
  // Abramowitz-Stegun 7.1.26 promises 1.5e-7, plus float rounding: below 3e-7 with fused
  // multiply-adds (-O3 -march=native), 3.2e-7 without them (seen in the -O1 sanitizer build).
  CHECK(worst_erf < 4e-7);
  CHECK(worst_gelu < 3e-7);
  CHECK(worst_dgelu < 5e-7);
  CHECK(math::erf_vec(0.0f) == 0.0f);
  CHECK(math::erf_vec(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(math::erf_vec(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(math::erf_vec(std::numeric_limits<float>::quiet_NaN())));
  // The tensor op takes the same float path: float32 gelu agrees with float64 gelu.
  Tensor x = uniform({1000}, -6, 6, default_generator(), Dtype::Float64);
  check_close(gelu(x.to(Dtype::Float32)), gelu(x), 3e-7);
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
