// The comparisons (eq, ne, lt, le, gt, ge) and the logical ops (logical_and / or / xor / not, & | ^ ~):
// against a naive loop on random operands with broadcasting and strides, NaN, every dtype, masks built the
// seeds' way (causal and padding), and the errors. Each case runs on every device (the emulated GPU in CI).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// Multiples of 1/2 in [-2, 2): many equal pairs, so each comparison gives both answers.
Tensor halves(const Shape& shape, uint64_t seed, Dtype dtype = Dtype::Float32) {
  Generator gen(seed);
  std::vector<double> v = uniform(shape, -2, 2, gen, Dtype::Float64).to_vector<double>();
  for (double& x : v) x = std::round(x * 2) / 2;
  return from_vector(v, {int64_t(v.size())}).reshape(shape).to(dtype);  // a shape {} stays 0-dim
}

// a and b broadcast to `shape`, read element by element (row-major) on the host.
std::vector<double> broadcast_values(const Tensor& t, const Shape& shape) {
  return t.detach().to(Device::cpu()).expand(shape).contiguous().to_vector<double>();
}

struct Comparison {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  std::function<bool(double, double)> naive;
};

const std::vector<Comparison>& comparisons() {
  static const std::vector<Comparison> all = {
      {"eq", eq, [](double a, double b) { return a == b; }}, {"ne", ne, [](double a, double b) { return a != b; }},
      {"lt", lt, [](double a, double b) { return a < b; }},  {"le", le, [](double a, double b) { return a <= b; }},
      {"gt", gt, [](double a, double b) { return a > b; }},  {"ge", ge, [](double a, double b) { return a >= b; }},
  };
  return all;
}

void check_against_naive(const Comparison& c, const Tensor& a, const Tensor& b) {
  Tensor out = c.op(a, b);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "test");
  REQUIRE(out.shape() == shape);
  CHECK(out.dtype() == Dtype::Bool);
  const std::vector<double> x = broadcast_values(a, shape), y = broadcast_values(b, shape);
  const std::vector<bool> got = out.to(Device::cpu()).to_vector<bool>();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(c.name << " element " << i << ": " << x[i] << ", " << y[i]);
    CHECK(got[i] == c.naive(x[i], y[i]));
  }
}

}  // namespace

DEVICE_TEST_CASE("comparisons: every one against a naive loop, broadcast and strided, every dtype") {
  uint64_t seed = 1;
  for (const Comparison& c : comparisons()) {
    for (Dtype dtype : {Dtype::Float32, Dtype::Float64, Dtype::Int64, Dtype::Int32, Dtype::BFloat16}) {
      INFO(c.name << " on " << dtype_name(dtype));
      const auto of = [&](const Shape& shape) { return halves(shape, ++seed, dtype).to(device); };
      check_against_naive(c, of({3, 5}), of({3, 5}));
      check_against_naive(c, of({4, 1, 3}), of({2, 1}));           // both broadcast
      check_against_naive(c, of({5, 3}).transpose(0, 1), of({3, 5}));  // strided
      check_against_naive(c, of({3, 5}), of({}));                  // a 0-dim operand
      check_against_naive(c, of({6, 4}).narrow(1, 1, 2), of({1, 2}));
    }
    // bool operands compare as 0 and 1.
    const Tensor p = from_vector<bool>({true, true, false, false}, {}, device), q = from_vector<bool>({true, false, true, false}, {}, device);
    check_against_naive(c, p, q);
  }
}

DEVICE_TEST_CASE("comparisons: NaN compares unequal to everything, itself too; infinities order") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor a = tensor({nan, nan, 1, -inf, inf}).to(device), b = tensor({nan, 1, nan, -inf, 1e30}).to(device);
  check_values(eq(a, b), {0, 0, 0, 1, 0}, 0);
  check_values(ne(a, b), {1, 1, 1, 0, 1}, 0);
  check_values(lt(a, b), {0, 0, 0, 0, 0}, 0);
  check_values(le(a, b), {0, 0, 0, 1, 0}, 0);
  check_values(gt(a, b), {0, 0, 0, 0, 1}, 0);
  check_values(ge(a, b), {0, 0, 0, 1, 1}, 0);
  check_values(a != a, {1, 1, 0, 0, 0}, 0);  // the NaN test
  CHECK(eq(zeros({0, 3}, Dtype::Float32, device), 0).shape() == Shape{0, 3});
}

DEVICE_TEST_CASE("logical ops: truth tables, other dtypes read as nonzero, broadcasting, and the operators") {
  const Tensor p = from_vector<bool>({true, true, false, false}, {}, device);
  const Tensor q = from_vector<bool>({true, false, true, false}, {}, device);
  check_values(logical_and(p, q), {1, 0, 0, 0}, 0);
  check_values(logical_or(p, q), {1, 1, 1, 0}, 0);
  check_values(logical_xor(p, q), {0, 1, 1, 0}, 0);
  check_values(logical_not(p), {0, 0, 1, 1}, 0);
  check_values(p & q, {1, 0, 0, 0}, 0);
  check_values(p | q, {1, 1, 1, 0}, 0);
  check_values(p ^ q, {0, 1, 1, 0}, 0);
  check_values(~p, {0, 0, 1, 1}, 0);
  check_values(~(p & q) | (p ^ q), {0, 1, 1, 1}, 0);
  for (const Tensor& t : {logical_and(p, q), logical_not(p), p | q}) CHECK(t.dtype() == Dtype::Bool);
  // Any dtype: nonzero is true (NaN too), as torch.logical_and.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = tensor({0, -0.5, nan, 0}).to(device);
  const Tensor ids = from_vector<int64_t>({3, 0, 0, -1}, {}, device);
  check_values(logical_and(x, ids), {0, 0, 0, 0}, 0);
  check_values(logical_or(x, ids), {1, 1, 1, 1}, 0);
  check_values(logical_xor(x, p), {1, 0, 1, 0}, 0);
  check_values(logical_not(x), {1, 0, 0, 1}, 0);
  check_values(logical_not(ids), {0, 1, 1, 0}, 0);
  // Broadcasting: a row mask with a column mask.
  const Tensor row = from_vector<bool>({true, false, true}, {1, 3}, device), col = from_vector<bool>({true, false}, {2, 1}, device);
  Tensor both = row & col;
  CHECK(both.shape() == Shape{2, 3});
  check_values(both, {1, 0, 1, 0, 0, 0}, 0);
  check_values(row | col, {1, 1, 1, 1, 0, 1}, 0);
  check_values(logical_and(row.transpose(0, 1), col.transpose(0, 1)), {1, 0, 0, 0, 1, 0}, 0);
  CHECK(logical_or(zeros({0, 2}, Dtype::Bool, device), row.narrow(1, 0, 2)).shape() == Shape{0, 2});
}

DEVICE_TEST_CASE("masks built as the seeds build them: causal, padding, both") {
  const int64_t T = 4;
  const Tensor ids = from_vector<int64_t>({5, 7, 0, 0, 3, 0, 0, 0}, {2, T}, device);  // 0 is padding
  const Tensor keep = (ids != 0).unsqueeze(1).unsqueeze(1);                         // [B, 1, 1, T]
  const Tensor causal = tril(ones({T, T}, Dtype::Bool, device));                   // [T, T], true = may see
  const Tensor mask = keep & causal;                                                // [B, 1, T, T]
  CHECK(mask.shape() == Shape{2, 1, T, T});
  Tensor scores = masked_fill(zeros({2, 1, T, T}, Dtype::Float32, device), mask == 0, -1e9);
  const std::vector<float> s = scores.to_vector<float>();
  const std::vector<int64_t> host = ids.to(Device::cpu()).to_vector<int64_t>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const bool visible = j <= i && host[size_t(b * T + j)] != 0;
        CHECK(s[size_t((b * T + i) * T + j)] == (visible ? 0.0f : -1e9f));
      }
}

TEST_CASE("comparisons and logical ops: errors name the op") {
  const Tensor ids = arange(3), mask = from_vector<bool>({true, false, true});
  check_error([&] { ids & mask; }, "operator&: expected bool tensors (masks), got int64; Ember has no bitwise ops");
  check_error([&] { mask | ids; }, "operator|: expected bool tensors (masks), got int64");
  check_error([&] { zeros({3}) ^ mask; }, "operator^: expected bool tensors (masks), got float32");
  check_error([&] { ~ids; }, "operator~: expected bool tensors (masks), got int64");
  check_error([&] { ~Tensor(); }, "operator~: an input tensor is undefined");
  check_error([&] { logical_and(mask, Tensor()); }, "logical_and: an input tensor is undefined");
  check_error([&] { logical_not(Tensor()); }, "logical_not: the input tensor is undefined");
  check_error([&] { logical_or(mask, from_vector<bool>({true, false})); }, "logical_or: shapes [3] and [2] do not broadcast");
  check_error([&] { le(ids, arange(2)); }, "le: shapes [3] and [2] do not broadcast");
  check_error([&] { ge(ids, Tensor()); }, "ge: an input tensor is undefined");
  check_error([&] { ne(Tensor(), 1); }, "ne: the tensor operand is undefined");
}

CUDA_TEST_CASE("comparisons and logical ops: operands on different devices are an error") {
  const Tensor on_gpu = arange(3).to(Device::cuda(0)), on_cpu = arange(3);
  check_error([&] { le(on_gpu, on_cpu); }, "different devices");
  check_error([&] { logical_and(on_gpu, on_cpu); }, "different devices");
}
