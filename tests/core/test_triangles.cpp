// tril and triu: against a naive loop for every diagonal offset (beyond both corners too), batch dims,
// strided and broadcast inputs, every dtype, zero-size dims; float64 gradient checks (the gradient masked
// the same way); the causal mask; errors. Each device case runs on the emulated GPU in CI too.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// x's values with the naive triangle applied over its last two dims (row-major, any batch dims).
std::vector<double> naive_triangle(const Tensor& x, int64_t k, bool lower) {
  std::vector<double> v = x.detach().to(Device::cpu()).contiguous().to_vector<double>();
  const int64_t rows = x.size(-2), cols = x.size(-1);
  for (size_t e = 0; e < v.size(); ++e) {
    const int64_t i = int64_t(e) / cols % rows, j = int64_t(e) % cols;
    if (lower ? j - i > k : j - i < k) v[e] = 0;
  }
  return v;
}

}  // namespace

TEST_CASE("tril and triu: known numbers") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  check_values(tril(x), {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}, 0);
  check_values(triu(x), {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}, 0);
  check_values(tril(x, 1), {1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}, 0);
  check_values(tril(x, -1), {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}, 0);
  check_values(triu(x, 2), {0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}, 0);
  check_values(triu(x, -1), {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}, 0);
  // The causal mask of attention: true above the diagonal, where a query must not look.
  check_values(triu(ones({3, 3}, Dtype::Bool), 1), {0, 1, 1, 0, 0, 1, 0, 0, 0}, 0);
}

DEVICE_TEST_CASE("tril and triu: every offset, batch dims, strided and broadcast inputs, every dtype") {
  const Tensor base = random64({2, 3, 4, 5}, 1).to(device);
  for (const bool lower : {true, false}) {
    for (int64_t k = -6; k <= 7; ++k) {  // beyond the corners: all or nothing kept
      INFO((lower ? "tril" : "triu") << " k = " << k);
      const auto op = [&](const Tensor& t) { return lower ? tril(t, k) : triu(t, k); };
      for (const Tensor& x : {base, base.transpose(2, 3), base.narrow(3, 1, 3), base.select(0, 1),
                              base.narrow(0, 0, 1).expand({3, 3, 4, 5}), base.select(0, 0).select(0, 0)}) {
        Tensor y = op(x);
        CHECK(y.shape() == x.shape());
        check_values(y, naive_triangle(x, k, lower), 0);
      }
    }
  }
  const Tensor ints = arange(12).reshape({3, 4}).to(device);
  check_values(tril(ints), naive_triangle(ints, 0, true), 0);
  CHECK(tril(ints).dtype() == Dtype::Int64);
  const Tensor bf = base.select(0, 0).to(Dtype::BFloat16);
  CHECK(triu(bf, 1).dtype() == Dtype::BFloat16);
  check_values(triu(bf, 1), naive_triangle(bf, 1, false), 0);
  const Tensor mask = gt(base.select(0, 0), 0);
  check_values(tril(mask, -1), naive_triangle(mask, -1, true), 0);
  CHECK(tril(mask).dtype() == Dtype::Bool);
}

DEVICE_TEST_CASE("tril and triu: zero-size dims") {
  for (const Shape& shape : {Shape{0, 3}, Shape{3, 0}, Shape{0, 0}, Shape{2, 0, 4}}) {
    Tensor x = zeros(shape, Dtype::Float64, device).requires_grad_();
    Tensor y = tril(x, 1);
    CHECK(y.shape() == shape);
    sum(triu(x) * 2.0 + y).backward();
    CHECK(x.grad().shape() == shape);
  }
}

DEVICE_TEST_CASE("gradcheck: tril and triu") {
  for (const int64_t k : {-2, -1, 0, 1, 3}) {
    INFO("k = " << k);
    check_gradient(device, [k](auto& in) { return tril(in[0], k); }, {random64({3, 4}, 2)});
    check_gradient(device, [k](auto& in) { return triu(in[0], k); }, {random64({2, 4, 3}, 3)});
    check_gradient(device, [k](auto& in) { return tril(in[0].transpose(0, 1), k); }, {random64({4, 3}, 4)});
    check_gradient(device, [k](auto& in) { return triu(in[0].expand({2, 3, 3}), k); }, {random64({3, 3}, 5)});
  }
  // The gradient is masked exactly: 0 outside the triangle, the incoming gradient inside.
  Tensor x = random64({3, 3}, 6).to(device).requires_grad_();
  tril(x).backward(full({3, 3}, 2.0, Dtype::Float64, device));
  check_values(x.grad(), {2, 0, 0, 2, 2, 0, 2, 2, 2}, 0);
}

TEST_CASE("tril and triu: errors") {
  check_error([] { tril(arange(3)); }, "tril: expected a tensor with at least 2 dims (a matrix, or a batch of them), got shape [3]");
  check_error([] { triu(scalar(1.0)); }, "triu: expected a tensor with at least 2 dims");
  check_error([] { tril(Tensor()); }, "tril: the input tensor is undefined");
}
