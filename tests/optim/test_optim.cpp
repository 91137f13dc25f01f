// optim/: SGD, Adam, AdamW against steps computed by hand; schedules; clipping; state round trip.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {
Tensor param(std::initializer_list<double> values) { return tensor(values, {}, Dtype::Float64).requires_grad_(); }
void set_grad(Tensor& p, std::initializer_list<double> values) { p.set_grad(tensor(values, {}, Dtype::Float64)); }
}  // namespace

TEST_CASE("optim: SGD with and without momentum and weight decay") {
  Tensor p = param({1.0, -2.0});
  optim::SGD sgd({{{p}, 0.0}}, 0.1);
  set_grad(p, {0.5, 1.0});
  sgd.step();
  check_values(p, {1.0 - 0.05, -2.0 - 0.1});

  Tensor q = param({1.0});
  optim::SGD momentum({{{q}, 0.1}}, 0.1, 0.9);
  set_grad(q, {1.0});
  momentum.step();  // d = 1 + 0.1*1 = 1.1; v = 1.1; q = 1 - 0.11 = 0.89
  check_values(q, {0.89});
  set_grad(q, {1.0});
  momentum.step();  // d = 1 + 0.089 = 1.089; v = 0.9*1.1 + 1.089 = 2.079; q = 0.89 - 0.2079
  check_values(q, {0.89 - 0.2079}, 1e-9);
}

TEST_CASE("optim: Adam and AdamW steps by hand") {
  // Step 1: m = 0.1 g, v = 0.001 g^2; bias-corrected m^ = g, v^ = g^2 -> p -= lr * g / (|g| + eps).
  Tensor p = param({1.0, 2.0});
  optim::Adam adam({{{p}, 0.0}}, 0.01);
  set_grad(p, {0.5, -4.0});
  adam.step();
  check_values(p, {1.0 - 0.01 * 0.5 / (0.5 + 1e-8), 2.0 + 0.01 * 4.0 / (4.0 + 1e-8)}, 1e-12);
  // Step 2 with g = 1: m = 0.9*0.05 + 0.1 = 0.145, v = 0.999*0.00025 + 0.001 = 0.00124975
  set_grad(p, {1.0, 1.0});
  adam.step();
  double m_hat = 0.145 / (1 - 0.81), v_hat = 0.00124975 / (1 - 0.998001);
  double after_first = 1.0 - 0.01 * 0.5 / (0.5 + 1e-8);
  check_values(p.narrow(0, 0, 1), {after_first - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8)}, 1e-12);

  // AdamW: decay is decoupled: p = p * (1 - lr*wd) - lr * update.
  Tensor w = param({2.0});
  optim::AdamW adamw({{{w}, 0.1}}, 0.01);
  set_grad(w, {3.0});
  adamw.step();
  check_values(w, {2.0 * (1 - 0.001) - 0.01 * 3.0 / (3.0 + 1e-8)}, 1e-12);
  // Adam (coupled): weight decay joins the gradient: g = 3 + 0.1*2 = 3.2, first step moves by lr.
  Tensor a = param({2.0});
  optim::Adam coupled({{{a}, 0.1}}, 0.01);
  set_grad(a, {3.0});
  coupled.step();
  check_values(a, {2.0 - 0.01 * 3.2 / (3.2 + 1e-8)}, 1e-12);
  // Parameters without a gradient are left alone.
  Tensor untouched = param({5.0});
  optim::AdamW idle({{{untouched}, 0.1}}, 0.01);
  idle.step();
  check_values(untouched, {5.0});
}

TEST_CASE("optim: a group's lr_scale: its parameters step as at lr x scale, the others at lr, numbered as before") {
  // Two groups at scales 1 and 0.25 against two optimisers at lr and lr / 4: the same numbers, bit for bit.
  auto run = [](auto make, double scale_b) {
    Tensor a = param({1.0, -2.0}), b = param({0.5, 3.0});
    auto opt = make(std::vector<optim::ParamGroup>{{{a}, 0.1, 1.0}, {{b}, 0.1, scale_b}});
    for (int s = 0; s < 3; ++s) {
      set_grad(a, {0.3, -1.0 + s});
      set_grad(b, {2.0 - s, 0.7});
      opt.step();
    }
    return std::pair{a.to_vector<double>(), b.to_vector<double>()};
  };
  auto alone = [](auto make, double lr_factor, bool first) {
    Tensor x = first ? param({1.0, -2.0}) : param({0.5, 3.0});
    auto opt = make(std::vector<optim::ParamGroup>{{{x}, 0.1}}, lr_factor);
    for (int s = 0; s < 3; ++s) {
      set_grad(x, first ? std::initializer_list<double>{0.3, -1.0 + s} : std::initializer_list<double>{2.0 - s, 0.7});
      opt.step();
    }
    return x.to_vector<double>();
  };
  auto adamw = [](std::vector<optim::ParamGroup> g, double factor = 1.0) { return optim::AdamW(std::move(g), 0.01 * factor); };
  auto sgd = [](std::vector<optim::ParamGroup> g, double factor = 1.0) { return optim::SGD(std::move(g), 0.1 * factor, 0.9); };
  const auto [adam_a, adam_b] = run(adamw, 0.25);
  CHECK(adam_a == alone(adamw, 1.0, true));
  CHECK(adam_b == alone(adamw, 0.25, false));
  CHECK(adam_b != alone(adamw, 1.0, false));
  const auto [sgd_a, sgd_b] = run(sgd, 0.25);
  CHECK(sgd_a == alone(sgd, 1.0, true));
  CHECK(sgd_b == alone(sgd, 0.25, false));
  // Scale 0: the group does not move at all (not even its weight decay).
  const auto [moved, frozen] = run(adamw, 0.0);
  CHECK(frozen == std::vector<double>{0.5, 3.0});
  // The state keeps the global numbering ("1.exp_avg" is b's), whatever the scales.
  Tensor a = param({1.0}), b = param({2.0});
  optim::AdamW two({{{a}, 0.0, 0.5}, {{b}, 0.0, 1.0}}, 0.01);
  set_grad(a, {1.0});
  set_grad(b, {3.0});
  two.step();
  CHECK(two.state_dict().at("1.exp_avg").to_vector<double>() == std::vector<double>{(1 - 0.9) * 3.0});  // m = (1 - beta1) g
  // A negative or non-finite scale is refused.
  check_error([&] { optim::AdamW({{{param({1.0})}, 0.0, -0.5}}, 0.01); }, "learning-rate scale must be finite and >= 0");
  check_error([&] { optim::SGD({{{param({1.0})}, 0.0, NAN}}, 0.01); }, "learning-rate scale must be finite and >= 0");
}

TEST_CASE("optim: optimiser state round-trips and bad state is rejected") {
  Tensor p = param({1.0, 2.0});
  optim::AdamW adam({{{p}, 0.0}}, 0.01);
  set_grad(p, {0.5, 0.5});
  adam.step();
  auto state = adam.state_dict();
  CHECK(state.count("0.exp_avg") == 1);
  CHECK(state.at("step").item<int64_t>() == 1);
  Tensor q = param({1.0, 2.0});
  optim::AdamW restored({{{q}, 0.0}}, 0.01);
  restored.load_state_dict(state);
  CHECK(restored.step_count() == 1);
  state["0.exp_avg"] = zeros({3}, Dtype::Float64);
  check_error([&] { restored.load_state_dict(state); }, "'0.exp_avg' is float64 [3], parameter 0 is float64 [2]");
  state.erase("step");
  check_error([&] { restored.load_state_dict(state); }, "'step' is missing");
}

TEST_CASE("optim: step counts out of range, misnamed and missing moments are refused, changing nothing") {
  Tensor p = param({1.0, 2.0}), q = param({3.0});
  optim::AdamW adam({{{p, q}, 0.0}}, 0.01);
  set_grad(p, {0.5, 0.5});
  set_grad(q, {0.5});
  adam.step();
  const auto good = adam.state_dict();
  optim::AdamW other({{{param({1.0, 2.0}), param({3.0})}, 0.0}}, 0.01);
  auto with = [&](const std::string& name, const Tensor& t) {
    auto state = good;
    state[name] = t;
    return state;
  };
  auto without = [&](const std::string& name) {
    auto state = good;
    state.erase(name);
    return state;
  };
  // A step of INT64_MAX overflowed the next step (UB); -1 and INT64_MIN turned weights into NaN.
  for (int64_t step : {int64_t(-1), INT64_MIN, INT64_MAX})
    check_error([&] { other.load_state_dict(with("step", from_vector(std::vector<int64_t>{step}))); },
                "'step' is " + std::to_string(step));
  check_error([&] { other.load_state_dict(with("x.exp_avg", zeros({2}, Dtype::Float64))); },
              "unexpected entry 'x.exp_avg'");  // was "stoul"
  check_error([&] { other.load_state_dict(with("+0.exp_avg", zeros({2}, Dtype::Float64))); }, "unexpected entry");
  check_error([&] { other.load_state_dict(with("0.exp_avgg", zeros({2}, Dtype::Float64))); },
              "'0.exp_avgg' is not a buffer of this optimiser");
  check_error([&] { other.load_state_dict(with("7.exp_avg", zeros({2}, Dtype::Float64))); },
              "refers to parameter 7, but there are 2");
  check_error([&] { other.load_state_dict(without("1.exp_avg_sq")); }, "parameter 1 has '1.exp_avg' but no '1.exp_avg_sq'");
  check_error([&] { other.load_state_dict(with("0.exp_avg_sq", tensor({0.5, -1e-3}, {2}, Dtype::Float64))); },
              "a second moment must be >= 0");
  CHECK(other.step_count() == 0);  // nothing loaded
  CHECK(other.state_dict().size() == 1);
  // Both moments of a parameter missing is a state of its own (never updated); missing_state() names them.
  auto never_updated = without("1.exp_avg_sq");
  never_updated.erase("1.exp_avg");
  other.load_state_dict(never_updated);
  CHECK(other.missing_state() == std::vector<std::string>{"1.exp_avg", "1.exp_avg_sq"});
  other.load_state_dict(good);
  CHECK(other.missing_state().empty());
}

TEST_CASE("optim: the step count never overflows") {
  Tensor p = param({1.0});
  optim::AdamW adam({{{p}, 0.0}}, 0.01);
  set_grad(p, {0.5});
  adam.step();
  auto state = adam.state_dict();
  state["step"] = from_vector(std::vector<int64_t>{optim::Optimizer::max_steps});
  adam.load_state_dict(state);
  set_grad(p, {0.5});
  const double before = p.to_vector<double>()[0];
  check_error([&] { adam.step(); }, "step count 4611686018427387904 is out of range");
  CHECK(p.to_vector<double>()[0] == before);
}

TEST_CASE("optim: a CUDA graph's capture takes the last step again; a replay counts one") {
  // The capture runs step()'s host side once more for the step its warm-up just took: inside
  // RetakeLastStep the count is that step's again, and after it the count is as before, also when
  // the capture throws.
  Tensor p = param({1.0});
  optim::AdamW adam({{{p}, 0.0}}, 0.01);
  check_error([&] { optim::Optimizer::RetakeLastStep retake(adam); }, "there is no step to take again");
  for (int i = 0; i < 2; ++i) {
    set_grad(p, {0.5});
    adam.step();
  }
  {
    const optim::Optimizer::RetakeLastStep retake(adam);
    CHECK(adam.step_count() == 1);
    set_grad(p, {0.5});
    adam.step();  // the step taken again: it counts step 2
    CHECK(adam.step_count() == 2);
  }
  CHECK(adam.step_count() == 2);
  try {
    const optim::Optimizer::RetakeLastStep retake(adam);
    throw Error("the capture failed");
  } catch (const Error&) {
  }
  CHECK(adam.step_count() == 2);
  adam.count_replayed_step();
  CHECK(adam.step_count() == 3);
  CHECK(adam.state_dict()["step"].item<int64_t>() == 3);
}

TEST_CASE("optim: learning-rate schedules") {
  optim::Schedule constant{optim::ScheduleKind::Constant, 0.1, 5, 100};
  CHECK(constant.lr_at(0) == 0.1);
  CHECK(constant.lr_at(99) == 0.1);
  optim::Schedule linear{optim::ScheduleKind::WarmupLinear, 1.0, 10, 110};
  CHECK(linear.lr_at(0) == 0.0);
  CHECK(linear.lr_at(5) == doctest::Approx(0.5));
  CHECK(linear.lr_at(10) == doctest::Approx(1.0));
  CHECK(linear.lr_at(60) == doctest::Approx(0.5));
  CHECK(linear.lr_at(110) == doctest::Approx(0.0));
  optim::Schedule cosine{optim::ScheduleKind::WarmupCosine, 1.0, 10, 110};
  CHECK(cosine.lr_at(60) == doctest::Approx(0.5));
  CHECK(cosine.lr_at(35) == doctest::Approx(0.5 * (1 + std::cos(M_PI * 0.25))));
  check_error([] { optim::parse_schedule("step"); }, "unknown schedule 'step'");
}

TEST_CASE("optim: clip_grad_norm scales to the global norm") {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3.0, 0.0});
  set_grad(b, {4.0});
  double norm = optim::clip_grad_norm({a, b}, 1.0);
  CHECK(norm == doctest::Approx(5.0));
  check_values(a.grad(), {0.6, 0.0}, 1e-5);
  check_values(b.grad(), {0.8}, 1e-5);
  // Below the threshold nothing changes.
  set_grad(a, {0.3, 0.0});
  set_grad(b, {0.4});
  CHECK(optim::clip_grad_norm({a, b}, 1.0) == doctest::Approx(0.5));
  check_values(a.grad(), {0.3, 0.0});
}

TEST_CASE("optim: clip_grad_norm_ (the norm kept as a tensor) gives clip_grad_norm's norm and gradients") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    for (double max_norm : {1.0, 1e6}) {  // clipped, and left alone
      INFO(dtype_name(dtype) << " max_norm " << max_norm);
      Generator gen(11);
      std::vector<Tensor> a, b;
      double naive = 0;
      for (int64_t n : {0, 5, 16, 37, 1000}) {  // an empty tensor, and the 16 lanes' tails
        Tensor g = uniform({n}, -3, 3, gen, dtype);
        for (double x : g.to_vector<double>()) naive += x * x;
        Tensor pa = zeros({n}, dtype).requires_grad_(), pb = zeros({n}, dtype).requires_grad_();
        pa.set_grad(g.clone());
        pb.set_grad(g.clone());
        a.push_back(pa);
        b.push_back(pb);
      }
      const Tensor norm = optim::clip_grad_norm_(a, max_norm);
      const double expected = optim::clip_grad_norm(b, max_norm);
      CHECK(expected == doctest::Approx(std::sqrt(naive)).epsilon(1e-12));
      CHECK(norm.dtype() == Dtype::Float64);
      CHECK(norm.dim() == 0);
      CHECK(norm.item<double>() == expected);  // the same sums in the same order
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].grad().to_vector<double>() == b[i].grad().to_vector<double>());
    }
  }
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3.0, 0.0});
  set_grad(b, {4.0});
  CHECK(optim::clip_grad_norm_({a, b}, 1.0).item<double>() == doctest::Approx(5.0));
  check_values(a.grad(), {0.6, 0.0}, 1e-5);
  check_values(b.grad(), {0.8}, 1e-5);
}

TEST_CASE("optim: scale_all_ scales contiguous, strided and bfloat16 tensors as mul_ does") {
  Generator gen(3);
  std::vector<Tensor> all{uniform({40}, -2, 2, gen, Dtype::Float32), uniform({3, 5}, -2, 2, gen, Dtype::Float64),
                          uniform({4, 6}, -2, 2, gen, Dtype::Float32).transpose(0, 1),
                          uniform({9}, -2, 2, gen, Dtype::Float32).to(Dtype::BFloat16)};
  std::vector<Tensor> expected;
  for (const Tensor& t : all) expected.push_back(t.clone().mul_(0.3));
  scale_all_(all, 0.3);
  for (size_t i = 0; i < all.size(); ++i) {
    INFO("tensor " << i);
    CHECK(all[i].to_vector<double>() == expected[i].to_vector<double>());
  }
  check_error([] { scale_all_({Tensor()}, 2.0); }, "scale_all_: a tensor is undefined");
}
