// docs/autograd.md's worked example, compiled and run by CI: every number the doc shows is
// checked here (exit 1 if any differs), so the doc cannot drift from what Ember computes.
#include <cmath>
#include <cstdio>
#include <vector>

#include "autograd/ops.h"

using namespace ember;

int failures = 0;
void expect(const char* what, const Tensor& t, const std::vector<double>& want) {
  std::vector<double> got = t.to_vector<double>();
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = std::abs(got[i] - want[i]) < 1e-12;
  std::printf("%-10s = %s%s\n", what, t.str().c_str(), ok ? "" : "   <-- WRONG");
  failures += !ok;
}

int main() {
  const Dtype f64 = Dtype::Float64;

  // 1. A graph with a shared input: L = (a*b + a)^2 at a = 2, b = 3.
  Tensor a = scalar(2.0, f64).requires_grad_();
  Tensor b = scalar(3.0, f64).requires_grad_();
  Tensor c = a * b;   // 6   records mul: dc/da = b, dc/db = a
  Tensor d = c + a;   // 8   records add: both partials 1
  Tensor L = d * d;   // 64  records mul: dL/dd = 2d = 16
  L.backward();       // walks mul -> add -> mul backwards
  expect("L", L, {64});
  expect("a.grad", a.grad(), {64});  // 16 * b (through c) + 16 (through d) = 48 + 16
  expect("b.grad", b.grad(), {32});  // 16 * a

  // 2. Broadcasting: bias [3] is added to every row of X [2, 3].
  Tensor X = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, f64).requires_grad_();
  Tensor bias = tensor({0.5, -1, 2}, {}, f64).requires_grad_();
  sum(X * bias).backward();
  expect("X.grad", X.grad(), {0.5, -1, 2, 0.5, -1, 2});  // bias, once per row
  expect("bias.grad", bias.grad(), {5, 7, 9});           // column sums of X: sum_to(grad, [3])

  // 3. Views: gradients flow back into the viewed elements only.
  Tensor M = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, f64).requires_grad_();
  Tensor row = M.select(0, 1);                             // [4, 5, 6], no copy
  Tensor column = M.transpose(0, 1).select(1, 0);          // M's row 0 seen as column 0 of M^T
  (sum(row * row) + sum(column * 10.0)).backward();
  expect("M.grad", M.grad(), {10, 10, 10, 8, 10, 12});     // row 1: 2 * [4, 5, 6]; row 0: 10

  std::printf(failures ? "%d numbers differ from the doc\n" : "all numbers match the doc\n", failures);
  return failures ? 1 : 0;
}
