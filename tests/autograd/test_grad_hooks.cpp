// Gradient-ready hooks (autograd/hooks.h): called once per backward pass per leaf the pass reaches,
// after the last gradient for it has been added, while the rest of the graph is still to come;
// not for leaves the pass does not reach; gone with their handle.
#include <string>
#include <vector>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("grad hooks: once per pass, after every contribution, before the rest of backward") {
  Tensor a = from_vector(std::vector<double>{1, 2}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{3, 4}).requires_grad_();
  Tensor unused = from_vector(std::vector<double>{5}).requires_grad_();
  std::vector<std::string> events;
  std::vector<std::vector<double>> a_grad_seen;
  GradHookHandle ha = on_grad_ready(a, [&](const Tensor& leaf) {
    events.push_back("a");
    a_grad_seen.push_back(leaf.grad().to_vector<double>());
  });
  GradHookHandle hb = on_grad_ready(b, [&](const Tensor&) { events.push_back("b"); });
  GradHookHandle hu = on_grad_ready(unused, [&](const Tensor&) { events.push_back("unused"); });
  // a is used twice (in y and in z): its hook must wait for both contributions. b enters last
  // in forward, so backward reaches it first.
  Tensor y = a * 3.0;
  Tensor z = sum(y * a + exp(b));
  z.backward();
  CHECK(events == std::vector<std::string>{"b", "a"});
  REQUIRE(a_grad_seen.size() == 1);
  // d/da sum(3 a^2) = 6 a: both contributions were in .grad when the hook ran.
  CHECK(a_grad_seen[0] == std::vector<double>{6, 12});

  events.clear();
  sum(a * 2.0).backward();  // a second pass: a's hook again, b's not (not reached)
  CHECK(events == std::vector<std::string>{"a"});

  events.clear();
  ha.remove();
  sum(a * b).backward();
  CHECK(events == std::vector<std::string>{"b"});
}

TEST_CASE("grad hooks: a leaf behind a node no gradient flows into still gets its call, grad undefined") {
  Tensor a = from_vector(std::vector<double>{1, 2}).requires_grad_();
  int calls = 0;
  bool grad_defined = true;
  GradHookHandle h = on_grad_ready(a, [&](const Tensor& leaf) {
    ++calls;
    grad_defined = leaf.grad().defined();
  });
  // a -> y = 2 a -> an op whose backward sends nothing back: y's node is in the pass, but nothing
  // flows into it (the engine skips it); a's hook must run all the same, once.
  Tensor y = a * 2.0;
  Tensor blocked = y.detach() * 1.0;
  record("sends_nothing", blocked, {y}, [](const Tensor&) -> Grads { return {Tensor()}; });
  sum(blocked).backward();
  CHECK(calls == 1);
  CHECK_FALSE(grad_defined);
  // backward() on the leaf itself.
  calls = 0;
  a.backward(from_vector(std::vector<double>{1, 1}));
  CHECK(calls == 1);
  CHECK(grad_defined);
}

TEST_CASE("grad hooks: errors") {
  Tensor plain = zeros({2});
  check_error([&] { on_grad_ready(plain, [](const Tensor&) {}); }, "on_grad_ready: the tensor must be a leaf that requires grad");
  Tensor a = zeros({2}).requires_grad_();
  check_error([&] { on_grad_ready(a * 2.0, [](const Tensor&) {}); }, "on_grad_ready: the tensor must be a leaf");
}
