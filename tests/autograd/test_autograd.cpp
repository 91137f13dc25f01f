// The autograd engine: accumulation, reuse, no-grad, detach, freeing the graph, supplied gradients.
#include <cmath>
#include <cstdint>
#include <string>

#include "autograd/node.h"
#include "tests/helpers.h"
#include "optim/optimizer.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("autograd: a worked example by hand") {
  // y = sum(a * b + a), dy/da = b + 1, dy/db = a
  Tensor a = tensor({1, 2, 3}).requires_grad_();
  Tensor b = tensor({4, 5, 6}).requires_grad_();
  Tensor y = sum(a * b + a);
  check_values(y, {1 * 4 + 2 * 5 + 3 * 6 + 6});
  y.backward();
  check_values(a.grad(), {5, 6, 7});
  check_values(b.grad(), {1, 2, 3});
}

TEST_CASE("autograd: gradients accumulate across backward calls and zero_grad clears them") {
  Tensor w = tensor({2.0}).requires_grad_();
  sum(w * 3.0).backward();
  sum(w * w).backward();
  check_values(w.grad(), {3 + 4});
  w.zero_grad();
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("autograd: a diamond graph visits the shared node once with the summed gradient") {
  Tensor x = tensor({1.5}).requires_grad_();
  Tensor h = exp(x);           // shared
  Tensor y = sum(h * h + h);   // dy/dh = 2h + 1, dh/dx = h
  y.backward();
  double e = std::exp(1.5);
  check_values(x.grad(), {(2 * e + 1) * e});
}

TEST_CASE("autograd: no-grad records nothing, and detach cuts history") {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(grad_enabled());
  Tensor z = (x * 2.0).detach();
  CHECK_FALSE(z.requires_grad());
  CHECK((x * 2.0).requires_grad());
  CHECK((x * 2.0).grad_fn()->name == "mul_scalar");
}

TEST_CASE("autograd: the graph is freed after backward unless retained") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  check_values(x.grad(), {2 * std::exp(1.0), 2 * std::exp(1.0), 2 * std::exp(1.0)});
  check_error([&] { y.backward(); }, "already freed");
  // Saved tensors are released: the intermediate's storage is only held by us afterwards.
  Tensor a = ones({1000}).requires_grad_();
  Tensor h = exp(a);
  Tensor loss = sum(h * h);
  long before = h.impl()->storage.use_count();
  loss.backward();
  CHECK(h.impl()->storage.use_count() < before);
}

TEST_CASE("autograd: backward with a supplied gradient and error cases") {
  Tensor x = tensor({1, 2, 3}).requires_grad_();
  Tensor y = x * 2.0;
  y.backward(tensor({1, 0, -1}));
  check_values(x.grad(), {2, 0, -2});
  check_error([&] { (x * 2.0).backward(); }, "must be given for a non-scalar");
  check_error([&] { (x * 2.0).backward(ones({2})); }, "gradient shape [2]");
  check_error([] { ones({2}).backward(); }, "does not require grad");
  check_error([] { arange(3).requires_grad_(); }, "int64 tensors cannot require grad");
  check_error([&] { (x * 2.0).requires_grad_(false); }, "this tensor was made by mul_scalar");
  check_error([&] { x.add_(ones({3})); }, "in-place update of a tensor that requires grad");
}

TEST_CASE("autograd: backward refuses a gradient of another dtype, naming expected and got") {
  // A float64 seed for a float32 output: element-wise backward kernels would read its bits as float32
  // (PyTorch: "Function ... returned an invalid gradient ... expected type"), matmul / linear would fail in
  // an internal check. The error comes first, and nothing is accumulated.
  Tensor x = tensor({1, 2, 3}).requires_grad_();
  Tensor w = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor seed3 = tensor({1, 1, 1}, {}, Dtype::Float64), seed2 = tensor({1, 1}, {1, 2}, Dtype::Float64);
  const std::string message = "the gradient is float64 but the output";
  check_error([&] { (x * x).backward(seed3); }, message + " [3] is float32; expected a float32 gradient");
  check_error([&] { exp(x).backward(seed3); }, message);
  check_error([&] { (x + 1.0).backward(seed3); }, message);
  check_error([&] { matmul(x.view({1, 3}), w.transpose(0, 1)).backward(seed2); }, message + " [1, 2] is float32");
  check_error([&] { linear(x.view({1, 3}), w, Tensor()).backward(seed2); }, message + " [1, 2] is float32");
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  // The other way round, and on a leaf.
  Tensor x64 = tensor({1, 2}, {}, Dtype::Float64).requires_grad_();
  check_error([&] { (x64 * 2.0).backward(ones({2})); }, "the gradient is float32 but the output [2] is float64");
  check_error([&] { x64.backward(ones({2})); }, "the gradient is float32 but the output [2] is float64");
  CHECK_FALSE(x64.grad().defined());
}

TEST_CASE("autograd: a deep chain does not overflow the stack") {
  Tensor x = tensor({1.0}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  sum(y).backward();
  check_values(x.grad(), {1.0});
}

TEST_CASE("autograd: every in-place write bumps the storage's version, views included") {
  Tensor t = zeros({2, 3});
  auto version = [&] { return t.impl()->storage->version(); };
  uint64_t v = version();
  t.fill_(1.0);
  CHECK(version() == ++v);
  t.zero_();
  CHECK(version() == ++v);
  t.add_(ones({3}));
  CHECK(version() == ++v);
  t.mul_(2.0);
  CHECK(version() == ++v);
  t.copy_(ones({2, 3}));
  CHECK(version() == ++v);
  uniform_(t, 0, 1);
  CHECK(version() == ++v);
  normal_(t, 0, 1);
  CHECK(version() == ++v);
  t.narrow(1, 1, 2).fill_(3.0);  // a view writes the same storage
  CHECK(version() == ++v);
  Tensor read = t * 2.0 + sum(t);  // reading does not
  CHECK(version() == v);
}

TEST_CASE("autograd: a saved tensor changed in place before backward is an error naming the op and the versions") {
  // PyTorch: "one of the variables needed for gradient computation has been modified by an inplace
  // operation: ... is at version 1; expected version 0 instead". Without the check these gradients
  // are silently computed from the new values.
  Tensor x = tensor({1, 2, 3}).requires_grad_();
  Tensor w = tensor({4, 5, 6});
  Tensor y = x * w;  // mul saves w for x's gradient
  w.add_(ones({3}));
  check_error([&] { sum(y).backward(); },
              "backward of mul: one of the tensors needed for its gradient (float32 [3]) has been modified by an "
              "in-place operation: saved by mul at version 0, now at version 1");
  CHECK_FALSE(x.grad().defined());
  // An op that saves its output (exp), changed through a view of it.
  Tensor e = exp(x);
  {
    NoGradGuard no_grad;
    e.narrow(0, 0, 1).mul_(2.0);
  }
  check_error([&] { sum(e).backward(); }, "backward of exp: one of the tensors needed");
  // matmul, linear, layer_norm, softmax: each checks what it saved.
  Tensor m = tensor({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor p = matmul(x.view({1, 3}), m);
  m.fill_(0.0);
  check_error([&] { sum(p).backward(); }, "backward of matmul");
  Tensor weight = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor l = linear(x.view({1, 3}), weight, Tensor());
  uniform_(weight, -1, 1);
  check_error([&] { sum(l).backward(); }, "backward of linear");
  Tensor gain = ones({3});
  Tensor n = layer_norm(x.view({1, 3}), gain, Tensor());
  gain.copy_(tensor({2, 2, 2}));
  check_error([&] { sum(n * n).backward(); }, "backward of layer_norm");
  Tensor s = softmax(x, 0);
  {
    NoGradGuard no_grad;
    s.zero_();
  }
  check_error([&] { sum(s * s).backward(); }, "backward of softmax");
  // A change after backward, or of a clone, or before the op runs is fine; the gradient is then right.
  Tensor w2 = tensor({4, 5, 6});
  w2.add_(ones({3}));
  Tensor y2 = x * w2;
  Tensor y3 = x * w2.clone();
  w2.zero_();
  sum(y3).backward();
  check_values(x.grad(), {5, 6, 7});
  (void)y2;
}

TEST_CASE("autograd: the optimiser's step after backward does not trip the check, and a step before it is refused") {
  Tensor w = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = tensor({0.5, -0.5}).requires_grad_();
  Tensor x = tensor({1, -1, 2, 0, 1, 1}, {2, 3});
  optim::SGD sgd({{{w, b}, 0.0}}, 0.1, 0.9);
  for (int step = 0; step < 3; ++step) {  // the training loop: forward, backward, step
    w.zero_grad();
    b.zero_grad();
    sum(gelu(linear(x, w, b))).backward();
    sgd.step();
  }
  // Backward of a graph built before the step would read the new weights for x's gradient: refused, as
  // in PyTorch.
  Tensor xg = x.clone().requires_grad_();
  Tensor loss = sum(linear(xg, w, b) * linear(xg, w, b));
  const uint64_t before = w.impl()->storage->version();
  w.set_grad(ones({2, 3}));
  b.set_grad(ones({2}));
  optim::AdamW adam({{{w, b}, 0.01}}, 0.1);
  adam.step();
  CHECK(w.impl()->storage->version() > before);
  check_error([&] { loss.backward(); }, "backward of linear: one of the tensors needed for its gradient (float32 [2, 3])");
}
