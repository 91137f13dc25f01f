// Type promotion (core/type_promotion.h): PyTorch's result dtype for C++ numbers and 0-dim tensors against
// tensors with dims, in arithmetic and comparisons, for int64, bool, float32, float64 and bfloat16 tensors;
// true division; Ember's one refusal (two tensors with dims of different dtypes) and bool arithmetic, by
// their messages; gradients through a promoted operand; from_vector<bool>.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {
using Rank = PromotionOperand::Rank;
constexpr Dtype f32 = Dtype::Float32, f64 = Dtype::Float64, i32 = Dtype::Int32, i64 = Dtype::Int64,
                bf16 = Dtype::BFloat16, f16 = Dtype::Float16, b8 = Dtype::Bool;
constexpr PromotionOperand dims(Dtype d) { return {d, Rank::Dims}; }
constexpr PromotionOperand zero_dim(Dtype d) { return {d, Rank::ZeroDim}; }
constexpr PromotionOperand number(Dtype d) { return {d, Rank::Number}; }  // a number's default_dtype()
}  // namespace

// torch.result_type and torch.promote_types give these (checked against PyTorch's documented rules).
static_assert(promote_types(i32, i64) == i64);
static_assert(promote_types(bf16, f16) == f32);
static_assert(promote_types(b8, f16) == f16);
static_assert(promote_types(i64, bf16) == bf16);
static_assert(promote_types(f32, f64) == f64);
static_assert(result_type(dims(f32), number(i64)) == f32);      // x * 2
static_assert(result_type(dims(i64), number(f32)) == f32);      // ids * 2.5: the default float dtype
static_assert(result_type(dims(i32), number(i64)) == i32);      // a number does not widen its category
static_assert(result_type(dims(b8), number(i64)) == i64);       // mask * 2
static_assert(result_type(dims(b8), number(b8)) == b8);
static_assert(result_type(dims(b8), number(f32)) == f32);
static_assert(result_type(dims(i64), number(b8)) == i64);
static_assert(result_type(dims(f64), zero_dim(f32)) == f64);    // float64 scores / a float32 0-dim tensor
static_assert(result_type(dims(f32), zero_dim(f64)) == f32);    // the same category does not widen
static_assert(result_type(dims(bf16), zero_dim(f32)) == bf16);
static_assert(result_type(dims(i64), zero_dim(f64)) == f64);    // a higher category: the 0-dim tensor's own dtype
static_assert(result_type(dims(i32), zero_dim(i64)) == i32);
static_assert(result_type(dims(b8), zero_dim(i32)) == i32);
static_assert(result_type(zero_dim(i32), zero_dim(f32)) == f32);  // two 0-dim tensors: promote_types
static_assert(result_type(zero_dim(f32), zero_dim(f64)) == f64);
static_assert(result_type(zero_dim(i64), number(f32)) == f32);
static_assert(result_type(zero_dim(f64), number(i64)) == f64);
static_assert(result_type(zero_dim(b8), number(i64)) == i64);
static_assert(result_type(dims(bf16), dims(f32)) == f32);         // Ember promotes only this pair of tensors with dims

TEST_CASE("type promotion: a C++ number's category comes from its C++ type") {
  CHECK(Scalar(true).kind() == Scalar::Kind::Bool);
  CHECK(Scalar(2).kind() == Scalar::Kind::Integer);
  CHECK(Scalar(int64_t(1) << 60).to_int64() == int64_t(1) << 60);  // kept exactly
  CHECK(Scalar(uint8_t(7)).kind() == Scalar::Kind::Integer);
  CHECK(Scalar(2.5f).kind() == Scalar::Kind::Floating);
  CHECK(Scalar(2.5).default_dtype() == Dtype::Float32);
  CHECK(Scalar(2).default_dtype() == Dtype::Int64);
  CHECK(Scalar(false).default_dtype() == Dtype::Bool);
}

DEVICE_TEST_CASE("type promotion: arithmetic with a number keeps the tensor's dtype unless the number is of a higher category") {
  const Tensor ids = arange(4).to(device);  // int64 [0, 1, 2, 3]
  struct Row {
    const char* what;
    Tensor got;
    Dtype dtype;
    std::vector<double> values;
  };
  const Tensor mask = from_vector<bool>({true, false, true}, {}, device);
  const Tensor x32 = tensor({1, -2, 4}).to(device), x64 = tensor({1, -2, 4}, {}, f64).to(device);
  const Tensor xb = tensor({1, -2, 4}).to(bf16).to(device);
  const Row rows[] = {
      {"ids * 2", ids * 2, i64, {0, 2, 4, 6}},
      {"ids + 3", ids + 3, i64, {3, 4, 5, 6}},
      {"ids - 1", ids - 1, i64, {-1, 0, 1, 2}},
      {"10 - ids", 10 - ids, i64, {10, 9, 8, 7}},
      {"2 * ids", 2 * ids, i64, {0, 2, 4, 6}},
      {"-ids", -ids, i64, {0, -1, -2, -3}},
      {"ids * 2.5", ids * 2.5, f32, {0, 2.5, 5, 7.5}},
      {"ids + 0.5", ids + 0.5, f32, {0.5, 1.5, 2.5, 3.5}},
      {"ids / 2 (true division)", ids / 2, f32, {0, 0.5, 1, 1.5}},
      {"6 / (ids + 1)", 6 / (ids + 1), f32, {6, 3, 2, 1.5}},
      {"mask * 2", mask * 2, i64, {2, 0, 2}},
      {"mask + 1", mask + 1, i64, {2, 1, 2}},
      {"mask * 0.5", mask * 0.5, f32, {0.5, 0, 0.5}},
      {"1 - mask", 1 - mask, i64, {0, 1, 0}},
      {"x32 * 2", x32 * 2, f32, {2, -4, 8}},
      {"x32 / 8", x32 / 8, f32, {0.125, -0.25, 0.5}},
      {"x32 + true", x32 + true, f32, {2, -1, 5}},
      {"x64 / sqrt(16.0)", x64 / std::sqrt(16.0), f64, {0.25, -0.5, 1}},
      {"x64 * 3", x64 * 3, f64, {3, -6, 12}},
      {"xb * 2", xb * 2, bf16, {2, -4, 8}},
      {"xb + 1.5", xb + 1.5, bf16, {2.5, -0.5, 5.5}},
      {"1 / xb", 1 / xb, bf16, {1, -0.5, 0.25}},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    CHECK(row.got.dtype() == row.dtype);
    CHECK(row.got.device() == device);
    check_values(row.got.to(Device::cpu()), row.values, 0);
  }
  // An int64 keeps all its bits: 2^60 + 1 is not a double.
  const int64_t big = (int64_t(1) << 60) + 1;
  CHECK((from_vector<int64_t>({1}, {}, device) + (big - 1)).item<int64_t>() == big);
  CHECK((from_vector<int64_t>({big}, {}, device) == big).item<bool>());
  CHECK(!(from_vector<int64_t>({big}, {}, device) == big - 1).item<bool>());
  // True division by zero gives infinities and NaN, as floats do (never an integer division's trap).
  const std::vector<float> by_zero = (from_vector<int64_t>({1, 0, -1}, {}, device) / 0).to_vector<float>();
  CHECK(std::isinf(by_zero[0]));
  CHECK(by_zero[0] > 0);
  CHECK(std::isnan(by_zero[1]));
  CHECK((std::isinf(by_zero[2]) && by_zero[2] < 0));
  const Tensor ints = from_vector<int64_t>({7, -7}, {}, device);
  check_values(div(ints, from_vector<int64_t>({2, 2}, {}, device)), {3.5, -3.5}, 0);
  CHECK(div(ints, ints).dtype() == f32);
}

DEVICE_TEST_CASE("type promotion: a 0-dim tensor against a tensor with dims, and two 0-dim tensors") {
  const Tensor x64 = tensor({1, -2, 4}, {}, f64).to(device), x32 = tensor({1, -2, 4}).to(device);
  // The seeds' scores / sqrt(tensor(d_k)): a float32 0-dim tensor does not narrow float64 scores.
  Tensor scaled = x64 / sqrt(scalar(16.0, f32, device));
  CHECK(scaled.dtype() == f64);
  check_values(scaled, {0.25, -0.5, 1}, 0);
  CHECK((x32 * scalar(2.0, f64, device)).dtype() == f32);
  CHECK((tensor({1, 2}).to(bf16).to(device) * scalar(2.0, f32, device)).dtype() == bf16);
  const Tensor ids = arange(3).to(device);
  Tensor widened = ids * scalar(0.5, f64, device);  // a higher category: the 0-dim tensor's float64
  CHECK(widened.dtype() == f64);
  check_values(widened, {0, 0.5, 1}, 0);
  CHECK((ids + scalar(1.0, f32, device)).dtype() == f32);
  CHECK((ids + scalar(1.0, i32, device)).dtype() == i64);
  CHECK((scalar(1.0, i64, device) + scalar(0.5, f64, device)).dtype() == f64);
  CHECK((scalar(1.0, i64, device) + scalar(0.5, f64, device)).dim() == 0);
  // The seeds' masked_fill(mask == 0, ...) with an int64 mask and a float32 0-dim zero: compared as float32.
  const Tensor mask = from_vector<int64_t>({1, 0, 1, 1}, {}, device);
  Tensor hidden = eq(mask, scalar(0.0, f32, device));
  CHECK(hidden.dtype() == b8);
  check_values(hidden, {0, 1, 0, 0}, 0);
  check_values(masked_fill(zeros({4}, f32, device), mask == 0, -1e9), {0, -1e9, 0, 0}, 0);
}

DEVICE_TEST_CASE("type promotion: comparisons with numbers, in the promoted dtype") {
  const Tensor ids = arange(4).to(device);
  check_values(ids == 2, {0, 0, 1, 0}, 0);
  check_values(2 == ids, {0, 0, 1, 0}, 0);
  check_values(ids == 1.5, {0, 0, 0, 0}, 0);  // an int tensor against a float compares as float: never equal
  check_values(ids < 1.5, {1, 1, 0, 0}, 0);
  check_values(1.5 < ids, {0, 0, 1, 1}, 0);   // turned around: ids > 1.5
  check_values(ids >= 2, {0, 0, 1, 1}, 0);
  check_values(2 >= ids, {1, 1, 1, 0}, 0);
  check_values(ids != 0, {0, 1, 1, 1}, 0);
  check_values(ne(ids, 3), {1, 1, 1, 0}, 0);
  check_values(le(ids, 1), {1, 1, 0, 0}, 0);
  check_values(ge(ids, 1), {0, 1, 1, 1}, 0);
  check_values(gt(ids, -1), {1, 1, 1, 1}, 0);
  check_values(lt(ids, 0), {0, 0, 0, 0}, 0);
  const Tensor mask = from_vector<bool>({true, false}, {}, device);
  check_values(mask == 0, {0, 1}, 0);  // a bool against an integer: compared as int64
  check_values(mask == true, {1, 0}, 0);
  check_values(mask > 0.5, {1, 0}, 0);
  const Tensor xb = tensor({0.5, 1, 2}).to(bf16).to(device);
  check_values(xb >= 1, {0, 1, 1}, 0);
  CHECK((xb >= 1).dtype() == b8);
}

TEST_CASE("type promotion: what stays an error, by its message") {
  // Two tensors with dims of different dtypes: convert one (PyTorch would promote; Ember asks).
  check_error([] { zeros({2}) * zeros({2}, f64); },
              "mul: dtypes differ (float32 and float64): tensors with dims are not promoted to a common dtype");
  check_error([] { arange(2) + zeros({2}); }, "add: dtypes differ (int64 and float32)");
  check_error([] { eq(arange(2), zeros({2})); }, "eq: dtypes differ (int64 and float32)");
  check_error([] { div(arange(2), zeros({2}, f64)); }, "div: dtypes differ (int64 and float64)");
  // Arithmetic on bools: PyTorch's add on bools is an or, its sub an error; Ember points at the logical ops.
  const Tensor mask = from_vector<bool>({true, false});
  check_error([&] { mask + mask; }, "add: arithmetic on bool tensors is not defined (logical_and, logical_or");
  check_error([&] { mask + true; }, "add: arithmetic on bool tensors is not defined");
  check_error([&] { mask * scalar(1.0, b8); }, "mul: arithmetic on bool tensors is not defined");
  check_error([&] { -mask; }, "neg: expected a floating tensor (float32, float64 or bfloat16), got bool");
  check_error([] { Tensor() * 2; }, "mul: the tensor operand is undefined");
  check_error([] { eq(Tensor(), 0); }, "eq: the tensor operand is undefined");
}

TEST_CASE("type promotion: gradients flow through a promoted operand, in its own dtype") {
  Tensor x = random64({2, 3}, 1).requires_grad_();
  Tensor s = scalar(3.0, f32).requires_grad_();  // float32 0-dim, widened to float64 by the differentiable `to`
  Tensor y = x * s;
  CHECK(y.dtype() == f64);
  sum(y).backward();
  REQUIRE(s.grad().defined());
  CHECK(s.grad().dtype() == f32);  // its gradient comes back in its own dtype
  CHECK(s.grad().item<float>() == doctest::Approx(sum(x).item<double>()).epsilon(1e-6));
  check_close(x.grad(), full({2, 3}, 3.0, f64), 0);
  // float64 gradchecks through numbers and 0-dim tensors on either side.
  check_gradient([](auto& in) { return (in[0] * 2 + 1) / 4 - 3 * in[0]; }, {random64({3, 2}, 2)});
  check_gradient([](auto& in) { return 2 / (in[0] + 3) - (1 - in[0]); }, {random64({4}, 3)});
  check_gradient([](auto& in) { return in[0] / in[1]; }, {random64({2, 3}, 4), random64({}, 5, 1, 2)});
  check_gradient([](auto& in) { return in[1] - in[0] * in[1]; }, {random64({2, 3}, 6), random64({}, 7)});
}

DEVICE_TEST_CASE("from_vector<bool> and from_vector<BFloat16>: masks and half-width values from C++ vectors") {
  Tensor mask = from_vector<bool>({true, false, false, true, true, false}, {2, 3}, device);
  CHECK(mask.dtype() == b8);
  CHECK(mask.shape() == Shape{2, 3});
  CHECK(mask.device() == device);
  CHECK(mask.to(Device::cpu()).to_vector<bool>() == std::vector<bool>{true, false, false, true, true, false});
  check_values(masked_fill(ones({2, 3}, f32, device), mask, 0.0), {0, 1, 1, 0, 0, 1}, 0);
  CHECK(from_vector<bool>({}).shape() == Shape{0});
  Tensor halves = from_vector<BFloat16>({BFloat16(1.5f), BFloat16(-2.0f)}, {}, device);
  CHECK(halves.dtype() == bf16);
  check_values(halves, {1.5, -2}, 0);
  check_error([] { from_vector<bool>({true, false, true}, {2, 2}); }, "from_vector: 3 values do not fill shape [2, 2]");
}
