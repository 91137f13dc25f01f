// Softmax and log-softmax: known values, numerical stability (large values, -inf), any dim,
// non-contiguous inputs, the vectorised float exp, fused backward against a composed reference,
// float64 gradchecks and errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu/lanes.h"
#include "core/cpu/rows.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

// softmax composed from existing ops (its gradient flows through them): the reference. The max
// shift is a constant for the gradient (softmax does not change under shifts), so it is taken of x.detach().
Tensor reference_softmax(const Tensor& x, int64_t dim) {
  Tensor e = exp(x - max(x.detach(), {dim}, true));
  return e / sum(e, {dim}, true);
}
Tensor reference_log_softmax(const Tensor& x, int64_t dim) {
  Tensor shifted = x - max(x.detach(), {dim}, true);
  return shifted - log(sum(exp(shifted), {dim}, true));
}

}  // namespace

DEVICE_TEST_CASE("softmax: known values in float32 and float64") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    Tensor x = tensor({1, 2, 3}, {}, dtype).to(device);
    check_values(softmax(x, 0), {0.0900305732, 0.2447284711, 0.6652409558}, 1e-6);
    check_values(log_softmax(x, -1), {-2.4076059644, -1.4076059644, -0.4076059644}, 1e-6);
    CHECK(softmax(x, 0).dtype() == dtype);
    // Two rows: each is normalised on its own; shifting a row changes nothing.
    Tensor m = tensor({1, 2, 3, 11, 12, 13}, {2, 3}, dtype).to(device);
    check_values(softmax(m, 1), {0.0900305732, 0.2447284711, 0.6652409558, 0.0900305732, 0.2447284711,
                                 0.6652409558}, 1e-6);
    check_values(softmax(tensor({0, 0, 0, 0}, {}, dtype).to(device), 0), {0.25, 0.25, 0.25, 0.25});
  }
  // A 0-d tensor is a single element: probability 1.
  check_values(softmax(scalar(3.0).to(device), 0), {1.0});
  check_values(log_softmax(scalar(3.0).to(device), -1), {0.0});
}

DEVICE_TEST_CASE("softmax: large values stay finite, -inf gets probability 0") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    check_values(softmax(tensor({1000, 1001, 1002}, {}, dtype).to(device), 0), {0.0900305732, 0.2447284711, 0.6652409558}, 1e-6);
    check_values(log_softmax(tensor({1000, 1001, 1002}, {}, dtype).to(device), 0), {-2.4076059644, -1.4076059644, -0.4076059644},
                 1e-6);
    check_values(softmax(tensor({-1000, -1001, -1002}, {}, dtype).to(device), 0), {0.6652409558, 0.2447284711, 0.0900305732},
                 1e-6);
    // The same over a non-last dim (the column kernel): columns [1000, 1001, 1002] and [0, 0, 0].
    check_values(softmax(tensor({1000, 0, 1001, 0, 1002, 0}, {3, 2}, dtype).to(device), 0),
                 {0.0900305732, 1.0 / 3, 0.2447284711, 1.0 / 3, 0.6652409558, 1.0 / 3}, 1e-6);
    check_values(log_softmax(tensor({1000, 0, 1001, 0, 1002, 0}, {3, 2}, dtype).to(device), 0),
                 {-2.4076059644, -std::log(3.0), -1.4076059644, -std::log(3.0), -0.4076059644, -std::log(3.0)}, 1e-6);
    // 1e4 apart: the small one underflows to exactly 0, nothing becomes nan.
    check_values(softmax(tensor({0, 10000}, {}, dtype).to(device), 0), {0, 1});
    const double inf = std::numeric_limits<double>::infinity();
    Tensor with_inf = tensor({0, -inf, 0, 5}, {2, 2}, dtype).to(device);
    check_values(softmax(with_inf, 1), {1, 0, 0.0066928509, 0.9933071491}, 1e-6);
    std::vector<double> logs = log_softmax(with_inf, 1).to_vector<double>();
    CHECK(logs[0] == 0.0);
    CHECK(logs[1] == -inf);
    CHECK(logs[2] == doctest::Approx(-5.0067153485).epsilon(1e-6));
  }
}

DEVICE_TEST_CASE("softmax: non-last dims and non-contiguous inputs") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    Tensor x = tensor({1, 2, 3, 4, 5, 6}, {3, 2}, dtype).to(device);
    // dim 0: columns [1, 3, 5] and [2, 4, 6], each the softmax of [0, 2, 4].
    const std::vector<double> col = {0.0158762400, 0.1173104340, 0.8668133260};
    check_values(softmax(x, 0), {col[0], col[0], col[1], col[1], col[2], col[2]}, 1e-6);
    check_values(log_softmax(x, 0), {std::log(col[0]), std::log(col[0]), std::log(col[1]), std::log(col[1]),
                                     std::log(col[2]), std::log(col[2])}, 1e-6);
    // The same columns seen as rows of a transposed (non-contiguous) view.
    Tensor xt = x.transpose(0, 1);
    REQUIRE_FALSE(xt.is_contiguous());
    check_values(softmax(xt, 1), {col[0], col[1], col[2], col[0], col[1], col[2]}, 1e-6);
    check_values(softmax(xt, 0), {0.2689414214, 0.2689414214, 0.2689414214, 0.7310585786, 0.7310585786,
                                  0.7310585786}, 1e-6);
  }
  // A middle dim with inner > the kernel's column block (256), and a leading dim: against the reference.
  Generator gen(7);
  Tensor x = uniform({2, 5, 300}, -4, 4, gen, Dtype::Float32).to(device);
  check_close(softmax(x, 1), reference_softmax(x, 1), 1e-5);
  check_close(log_softmax(x, 1), reference_log_softmax(x, 1), 1e-5);
  check_close(softmax(x, 0), reference_softmax(x, 0), 1e-5);
  check_close(softmax(x, 1), softmax(x.transpose(1, 2), 2).transpose(1, 2), 1e-6);
  // Empty tensors give empty results.
  CHECK(softmax(zeros({0, 3}, Dtype::Float32, device), 1).shape() == Shape{0, 3});
  CHECK(log_softmax(zeros({4, 0}, Dtype::Float32, device), 1).shape() == Shape{4, 0});
}

DEVICE_TEST_CASE("softmax: long rows (vectorised path) against the composed reference") {
  Generator gen(11);
  // 1037 = 64 * 16 + 13: full lanes and a tail.
  Tensor x32 = uniform({3, 1037}, -20, 20, gen, Dtype::Float32).to(device);
  Tensor x64 = x32.to(Dtype::Float64);
  check_close(softmax(x32, 1), softmax(x64, 1), 1e-5);
  check_close(log_softmax(x32, 1), log_softmax(x64, 1), 1e-5);
  check_close(softmax(x64, 1), reference_softmax(x64, 1), 1e-12);
  check_values(sum(softmax(x32, 1), {1}), {1, 1, 1}, 1e-5);
}

TEST_CASE("softmax: the vectorised float exp matches std::exp") {
  double worst = 0, worst_subnormal = 0;
  int overflow_mismatches = 0;
  for (int i = -1200000; i <= 900000; ++i) {
    float x = float(i) * 1e-4f;
    float got = cpu::exp_vec(x);
    double expected = std::exp(double(x));
    if (expected < 1.1754944e-38) {  // subnormal range: absolute error, in subnormal steps of 1.4e-45
      worst_subnormal = std::max(worst_subnormal, std::abs(double(got) - expected));
    } else if (expected > 3.4028234e38) {
      overflow_mismatches += !std::isinf(got);
    } else {
      worst = std::max(worst, std::abs(double(got) - expected) / expected);
    }
  }
  CHECK(worst_subnormal <= 1.5e-45);  // at most one step
  CHECK(overflow_mismatches == 0);
  INFO("worst relative error " << worst);
  CHECK(worst < 1.5e-7);  // about 1 float ulp (1 ulp is 6e-8 to 1.2e-7 relative); measured 9.9e-8
  CHECK(cpu::exp_vec(0.0f) == 1.0f);
  CHECK(cpu::exp_vec(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isinf(cpu::exp_vec(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(cpu::exp_vec(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("softmax: the 16-lane exp gives the scalar exp's bits; the row blocks (16 lanes, then a tail) agree with float64") {
  // exp_vec on math::Floats16 (the row loops' vector form) against exp_vec on each float.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 88.7f, 89.0f, 95.0f, -87.0f, -103.9f, -104.0f, -120.0f,
                           inf, -inf, nan, 1e-30f, -1e-30f};
  for (int i = -1100000; i <= 900000; i += 7) xs.push_back(float(i) * 1e-4f);
  while (xs.size() % 16 != 0) xs.push_back(0.5f);
  int64_t mismatches = 0;
  for (size_t i0 = 0; i0 < xs.size(); i0 += 16) {
    math::Floats16 v;
    for (int k = 0; k < 16; ++k) v[k] = xs[i0 + k];
    const math::Floats16 e = math::exp_vec(v);
    for (int k = 0; k < 16; ++k) {
      const float scalar = math::exp_vec(xs[i0 + k]);
      const float lane = e[k];  // (clang takes no address of a vector type's element)
      mismatches += std::isnan(scalar) ? !std::isnan(lane) : std::memcmp(&scalar, &lane, sizeof scalar) != 0;
    }
  }
  CHECK(mismatches == 0);
  // The row blocks (16 lanes at a time, then a scalar tail) against float64 loops, on lengths around 16's
  // multiples: max exactly, the sums and the dot within float32's rounding of n terms.
  Generator gen(5);
  for (int64_t n : {0, 1, 15, 16, 17, 31, 33, 256, 257}) {
    CAPTURE(n);
    const Tensor xt = uniform({n}, -8, 8, gen, Dtype::Float32), yt = uniform({n}, -1, 1, gen, Dtype::Float32);
    std::vector<float> x(xt.data<float>(), xt.data<float>() + n), y(yt.data<float>(), yt.data<float>() + n);
    std::vector<float> out(static_cast<size_t>(n));
    float m = -inf;
    double sum = 0, dot = 0;
    for (int64_t i = 0; i < n; ++i) {
      m = std::max(m, x[size_t(i)]);
      sum += std::exp(double(x[size_t(i)]) - 1.0);
      dot += double(x[size_t(i)]) * y[size_t(i)];
    }
    CHECK(cpu::row_max(x.data(), n) == m);
    CHECK(cpu::row_sum_exp(x.data(), 1.0f, n) == doctest::Approx(sum).epsilon(1e-6));
    CHECK(cpu::row_exp_store_sum(x.data(), 1.0f, out.data(), n) == doctest::Approx(sum).epsilon(1e-6));
    // Each stored exponential within 2 float ulps of float64's (exp_vec's error is about 1 ulp, x - 1 rounds once).
    for (int64_t i = 0; i < n; ++i)
      CHECK(out[size_t(i)] == doctest::Approx(std::exp(double(x[size_t(i)]) - 1.0)).epsilon(2.5e-7));
    CHECK(cpu::row_dot(x.data(), y.data(), n) == doctest::Approx(dot).epsilon(1e-5));
    if (n > 20) {  // a NaN never wins the max, in the vector part or the tail
      x[3] = nan, x[size_t(n - 1)] = nan;
      float m2 = -inf;
      for (int64_t i = 0; i < n; ++i) m2 = std::isnan(x[size_t(i)]) ? m2 : std::max(m2, x[size_t(i)]);
      CHECK(cpu::row_max(x.data(), n) == m2);
    }
  }
}

TEST_CASE("row_dots: sixteen rows' totals in one tree, against float64; lane_totals sums each vector") {
  // lane_totals: vector j holds j + 1 in every lane (and a marker in lane 0), so each total is exact.
  cpu::lanes::Lanes<float> v[16];
  for (int j = 0; j < 16; ++j) {
    v[j] = cpu::lanes::splat(float(j + 1));
    v[j][0] += float(1000 * j);
  }
  const cpu::lanes::Lanes<float> totals = cpu::lanes::lane_totals<float>(v);
  for (int j = 0; j < 16; ++j) CHECK(totals[j] == float(16 * (j + 1) + 1000 * j));
  // row_dots on rows around 16's multiples, lengths around 16's multiples, one b for all rows or one per
  // row, accumulating alpha times each dot into a strided out.
  Generator gen(9);
  for (int64_t rows : {0, 1, 15, 16, 17, 40}) {
    for (int64_t n : {0, 1, 15, 16, 17, 32, 35}) {
      for (int64_t b_rs : {int64_t(0), n + 3}) {
        CAPTURE(rows);
        CAPTURE(n);
        CAPTURE(b_rs);
        const int64_t a_rs = n + 5;
        const Tensor at = uniform({rows * a_rs + 1}, -1, 1, gen, Dtype::Float64);
        const Tensor bt = uniform({rows * (b_rs == 0 ? 1 : b_rs) + n + 1}, -1, 1, gen, Dtype::Float64);
        const double* ad = at.data<double>();
        const double* bd = bt.data<double>();
        std::vector<float> a(ad, ad + at.numel()), b(bd, bd + bt.numel());
        std::vector<float> out(size_t(rows * 2 + 1), 0.25f);
        std::vector<double> out64(out.size(), 0.25);
        cpu::row_dots<float>(rows, n, -1.5f, a.data(), a_rs, b.data(), b_rs, out.data(), 2);
        cpu::row_dots<double>(rows, n, -1.5, ad, a_rs, bd, b_rs, out64.data(), 2);
        for (int64_t r = 0; r < rows; ++r) {
          double dot = 0;
          for (int64_t i = 0; i < n; ++i) dot += double(a[size_t(r * a_rs + i)]) * double(b[size_t(r * b_rs + i)]);
          CHECK(out[size_t(2 * r)] == doctest::Approx(0.25 - 1.5 * dot).epsilon(1e-5));
          double dot64 = 0;
          for (int64_t i = 0; i < n; ++i) dot64 += ad[r * a_rs + i] * bd[r * b_rs + i];
          CHECK(out64[size_t(2 * r)] == doctest::Approx(0.25 - 1.5 * dot64).epsilon(1e-13));
          CHECK(out[size_t(2 * r + 1)] == 0.25f);  // between the strided outputs: untouched
        }
        CHECK(out.back() == 0.25f);
      }
    }
  }
}

DEVICE_TEST_CASE("softmax: fused backward matches the gradient of the composed reference") {
  Generator gen(21);
  for (int64_t dim : {1, 0}) {
    Tensor base = uniform({6, 1037}, -5, 5, gen, Dtype::Float32).to(device);
    Tensor w = uniform({6, 1037}, -1, 1, gen, Dtype::Float32).to(device);
    for (bool log : {false, true}) {
      Tensor a = base.clone().detach().requires_grad_();
      Tensor b = base.clone().detach().requires_grad_();
      Tensor ya = log ? log_softmax(a, dim) : softmax(a, dim);
      Tensor yb = log ? reference_log_softmax(b, dim) : reference_softmax(b, dim);
      sum(ya * w).backward();
      sum(yb * w).backward();
      INFO("dim " << dim << " log " << log);
      check_close(a.grad(), b.grad(), 1e-4);
    }
  }
}

DEVICE_TEST_CASE("gradcheck: softmax and log_softmax") {
  auto x = random64({3, 4, 5}, 40, -3, 3);
  for (int64_t dim : {0, 1, 2, -1}) {
    check_gradient(device, [dim](auto& in) { return softmax(in[0], dim); }, {x.clone().detach()});
    check_gradient(device, [dim](auto& in) { return log_softmax(in[0], dim); }, {x.clone().detach()});
  }
  // Non-contiguous inputs.
  check_gradient(device, [](auto& in) { return softmax(in[0].transpose(0, 2), -1); }, {x.clone().detach()});
  check_gradient(device, [](auto& in) { return log_softmax(in[0].transpose(1, 2), 1); }, {x.clone().detach()});
  // Composed with another op, so the incoming gradient is not the gradcheck weight itself.
  check_gradient(device, [](auto& in) { return sum(softmax(in[0], 1) * in[0], {1}); }, {x.clone().detach()});
  // Long rows: the vectorised path, with tails.
  check_gradient(device, [](auto& in) { return log_softmax(in[0], 1); }, {random64({2, 37}, 41, -3, 3)});
}

TEST_CASE("softmax: errors name the op") {
  check_error([] { softmax(arange(3), 0); }, "softmax: expected a floating tensor");
  check_error([] { log_softmax(arange(3), 0); }, "log_softmax: expected a floating tensor");
  check_error([] { softmax(zeros({2, 3}), 2); }, "softmax: dim 2 out of range for a tensor with 2 dims");
  check_error([] { log_softmax(zeros({2, 3}), -3); }, "log_softmax: dim -3 out of range");
  check_error([] { softmax(Tensor(), 0); }, "softmax: the input tensor is undefined");
}
