// layer_norm: closed-form values, the fused op against a reference composed of existing ops
// (values and gradients), float64 gradchecks (with and without affine parameters, non-contiguous
// inputs), thread-count independence of dweight / dbias, and errors.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// The plain composition: (x - mean) * rsqrt(var + eps) * weight + bias over the last dim.
Tensor reference_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor centered = x - mean(x, {-1}, true);
  Tensor y = centered * rsqrt(var(x, {-1}, true, /*correction=*/0) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

struct Run {
  Tensor y, dx, dw, db;
};

// y and the gradients of sum(y * probe) for either implementation.
template <typename F>
Run run_with_grads(F&& f, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& probe) {
  Tensor x = x0.clone().detach().requires_grad_();
  Tensor w = w0.defined() ? w0.clone().detach().requires_grad_() : Tensor();
  Tensor b = b0.defined() ? b0.clone().detach().requires_grad_() : Tensor();
  Tensor y = f(x, w, b);
  sum(y * probe).backward();
  return {y, x.grad(), w.defined() ? w.grad() : Tensor(), b.defined() ? b.grad() : Tensor()};
}

}  // namespace

DEVICE_TEST_CASE("layer_norm: closed-form values") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    // [1, 2, 3, 4]: mean 2.5, population variance 1.25, so y = (x - 2.5) / sqrt(1.25) = [-3, -1, 1, 3] / sqrt(5).
    // [-2, 0, 0, 2]: mean 0, variance 2, so y = [-1, 0, 0, 1] * sqrt(2).
    Tensor x = tensor({1, 2, 3, 4, -2, 0, 0, 2}, {2, 4}, dtype).to(device);
    const double s5 = std::sqrt(5.0), s2 = std::sqrt(2.0);
    check_values(layer_norm(x, Tensor(), Tensor(), 0.0), {-3 / s5, -1 / s5, 1 / s5, 3 / s5, -s2, 0, 0, s2}, 1e-6);
    // With the default eps the rows are scaled by 1 / sqrt(var + 1e-5).
    const double r1 = 1.0 / std::sqrt(1.25 + 1e-5), r2 = 1.0 / std::sqrt(2.0 + 1e-5);
    check_values(layer_norm(x, Tensor(), Tensor()), {-1.5 * r1, -0.5 * r1, 0.5 * r1, 1.5 * r1, -2 * r2, 0, 0, 2 * r2},
                 1e-6);
    Tensor w = tensor({2, 1, 0.5, -1}, {}, dtype).to(device);
    Tensor b = tensor({0.5, 0, 0, 1}, {}, dtype).to(device);
    check_values(layer_norm(x, w, b, 0.0),
                 {-6 / s5 + 0.5, -1 / s5, 0.5 / s5, -3 / s5 + 1, -2 * s2 + 0.5, 0, 0, -s2 + 1}, 1e-6);
    check_values(layer_norm(x, w, Tensor(), 0.0), {-6 / s5, -1 / s5, 0.5 / s5, -3 / s5, -2 * s2, 0, 0, -s2}, 1e-6);
    check_values(layer_norm(x, Tensor(), b, 0.0),
                 {-3 / s5 + 0.5, -1 / s5, 1 / s5, 3 / s5 + 1, -s2 + 0.5, 0, 0, s2 + 1}, 1e-6);
    // A constant row normalises to 0 (eps keeps the division finite), then gets the bias.
    check_values(layer_norm(full({1, 4}, 10.0, dtype, device), w, b), {0.5, 0, 0, 1});
    CHECK(layer_norm(x, w, b).device() == device);
    CHECK(layer_norm(x, w, b).dtype() == dtype);
    CHECK(layer_norm(x, w, b).shape() == Shape{2, 4});
  }
}

DEVICE_TEST_CASE("layer_norm: fused matches the composed reference, values and gradients") {
  Generator gen(5);
  struct Case {
    Shape shape;
    bool weight, bias;
  };
  // D = 33 and 1037 have lane tails; [70, 1037] spans several dweight chunks.
  for (const Case& c : {Case{{4, 7, 33}, true, true}, Case{{5, 33}, true, false}, Case{{5, 33}, false, true},
                        Case{{3, 4}, false, false}, Case{{70, 1037}, true, true}}) {
    for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
      const int64_t D = c.shape.back();
      Tensor x = uniform(c.shape, -2, 3, gen, dtype).to(device);
      Tensor w = c.weight ? uniform({D}, 0.5, 1.5, gen, dtype).to(device) : Tensor();
      Tensor b = c.bias ? uniform({D}, -1, 1, gen, dtype).to(device) : Tensor();
      Tensor probe = uniform(c.shape, -1, 1, gen, dtype).to(device);
      Run fused = run_with_grads([](auto& x, auto& w, auto& b) { return layer_norm(x, w, b, 1e-5); }, x, w, b, probe);
      Run ref = run_with_grads([](auto& x, auto& w, auto& b) { return reference_layer_norm(x, w, b, 1e-5); }, x, w,
                               b, probe);
      INFO("shape " << shape_str(c.shape) << " weight " << c.weight << " bias " << c.bias << " "
                    << dtype_name(dtype));
      const double tol = dtype == Dtype::Float64 ? 1e-10 : 2e-4;
      check_close(fused.y, ref.y, tol);
      check_close(fused.dx, ref.dx, tol);
      CHECK(fused.dw.defined() == c.weight);
      CHECK(fused.db.defined() == c.bias);
      if (c.weight) check_close(fused.dw, ref.dw, tol);
      if (c.bias) check_close(fused.db, ref.db, tol);
    }
  }
}

DEVICE_TEST_CASE("layer_norm: float32 stays accurate far from zero (two-pass statistics)") {
  Generator gen(6);
  Tensor x = uniform({8, 64}, -1, 1, gen, Dtype::Float64).to(device);
  // Shifting by 1e4 changes nothing in exact arithmetic; float32 rounds x + 1e4 to ~1e-3 absolute.
  Tensor shifted = (x + 1e4).to(Dtype::Float32);
  Tensor expected = layer_norm(shifted.to(Dtype::Float64), Tensor(), Tensor());
  check_close(layer_norm(shifted, Tensor(), Tensor()), expected, 1e-5);
  check_close(layer_norm(shifted, Tensor(), Tensor()), layer_norm(x, Tensor(), Tensor()), 1e-2);
  // The backward too (it shifts each row by its first element again): dx, dweight and dbias of the float32
  // rows against float64 on the same values.
  const Dtype f64 = Dtype::Float64;
  Tensor w = uniform({64}, 0.5, 1.5, gen, f64).to(device), b = uniform({64}, -1, 1, gen, f64).to(device);
  Tensor g = uniform({8, 64}, -1, 1, gen, f64).to(device);
  auto grads = [&](Dtype dtype) {
    Tensor xi = shifted.to(dtype).detach().requires_grad_(), wi = w.to(dtype).detach().requires_grad_();
    Tensor bi = b.to(dtype).detach().requires_grad_();
    layer_norm(xi, wi, bi).backward(g.to(dtype));
    return std::vector<Tensor>{xi.grad().to(f64), wi.grad().to(f64), bi.grad().to(f64)};
  };
  const std::vector<Tensor> got = grads(Dtype::Float32), want = grads(Dtype::Float64);
  for (size_t i = 0; i < got.size(); ++i) check_close(got[i], want[i], 1e-4);
}

TEST_CASE("layer_norm: dweight and dbias do not depend on the thread count") {
  Generator gen(8);
  // float64, so that a different summation order would show in the last bits.
  Tensor x = uniform({1000, 48}, -1, 1, gen, Dtype::Float64);
  Tensor w = uniform({48}, 0.5, 1.5, gen, Dtype::Float64);
  Tensor b = uniform({48}, -1, 1, gen, Dtype::Float64);
  Tensor probe = uniform({1000, 48}, -1, 1, gen, Dtype::Float64);
  const int saved = num_threads();
  std::vector<Run> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    runs.push_back(run_with_grads([](auto& x, auto& w, auto& b) { return layer_norm(x, w, b); }, x, w, b, probe));
  }
  set_num_threads(saved);
  for (size_t k = 1; k < runs.size(); ++k) {
    CHECK(runs[k].y.to_vector<double>() == runs[0].y.to_vector<double>());
    CHECK(runs[k].dx.to_vector<double>() == runs[0].dx.to_vector<double>());
    CHECK(runs[k].dw.to_vector<double>() == runs[0].dw.to_vector<double>());
    CHECK(runs[k].db.to_vector<double>() == runs[0].db.to_vector<double>());
  }
}

DEVICE_TEST_CASE("gradcheck: layer_norm") {
  auto x = random64({3, 4, 6}, 50, -2, 2);
  auto w = random64({6}, 51, 0.5, 1.5);
  auto b = random64({6}, 52);
  check_gradient(device, [](auto& in) { return layer_norm(in[0], in[1], in[2]); }, {x.clone(), w.clone(), b.clone()});
  check_gradient(device, [](auto& in) { return layer_norm(in[0], in[1], Tensor()); }, {x.clone(), w.clone()});
  check_gradient(device, [](auto& in) { return layer_norm(in[0], Tensor(), in[1]); }, {x.clone(), b.clone()});
  check_gradient(device, [](auto& in) { return layer_norm(in[0], Tensor(), Tensor()); }, {x.clone()});
  // Non-contiguous input: normalise over what was dim 1.
  check_gradient(device, [](auto& in) { return layer_norm(in[0].transpose(1, 2), in[1], in[2], 1e-3); },
                 {x.clone(), random64({4}, 53, 0.5, 1.5), random64({4}, 54)});
  // A non-contiguous weight (every other element of a [6, 2] tensor).
  check_gradient(device, [](auto& in) { return layer_norm(in[0], in[1].select(1, 0), in[2]); },
                 {x.clone(), random64({6, 2}, 55, 0.5, 1.5), b.clone()});
  // Only the parameters need grad: dx is not computed, dweight / dbias still are.
  check_gradient(device,
      [x = x.clone().detach().to(device)](auto& in) { return layer_norm(x, in[0], in[1]); }, {w.clone(), b.clone()});
  // Rows longer than the lanes (tails) and a 1-D input.
  check_gradient(device, [](auto& in) { return layer_norm(in[0], in[1], in[2]); },
                 {random64({2, 37}, 56), random64({37}, 57, 0.5, 1.5), random64({37}, 58)});
  check_gradient(device, [](auto& in) { return layer_norm(in[0], Tensor(), Tensor()); }, {random64({5}, 59)});
}

TEST_CASE("layer_norm: errors name the op and the shapes") {
  Tensor x = zeros({2, 4});
  check_error([&] { layer_norm(x, zeros({5}), Tensor()); },
              "layer_norm: weight shape [5] does not match the last dim 4 of input [2, 4]");
  check_error([&] { layer_norm(x, Tensor(), zeros({1, 4})); },
              "layer_norm: bias shape [1, 4] does not match the last dim 4 of input [2, 4]");
  check_error([&] { layer_norm(x, zeros({4}, Dtype::Float64), Tensor()); },
              "layer_norm: weight dtype float64 differs from the input dtype float32");
  check_error([] { layer_norm(arange(4), Tensor(), Tensor()); }, "layer_norm: expected a floating input");
  check_error([] { layer_norm(scalar(1.0), Tensor(), Tensor()); }, "layer_norm: the input must have at least 1 dim");
  check_error([] { layer_norm(zeros({3, 0}), Tensor(), Tensor()); }, "layer_norm: the last dim of input [3, 0] is empty");
  check_error([&] { layer_norm(x, Tensor(), Tensor(), -1.0); }, "layer_norm: eps must be >= 0");
}
