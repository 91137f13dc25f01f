// dropout: kept fraction, scale, the exact counter-based mask, reproducibility from the
// generator state, thread-count independence, identity in eval, gradcheck, errors.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

DEVICE_TEST_CASE("dropout: keeps about 1 - p of the elements, scaled by 1 / (1 - p)") {
  for (double p : {0.1, 0.5, 0.9}) {
    Generator gen(7);
    Tensor x = ones({200, 500}, Dtype::Float32, device);
    Tensor y = dropout(x, p, /*training=*/true, gen);
    CHECK(y.shape() == x.shape());
    std::vector<float> v = y.to_vector<float>();
    const float scale = float(1.0 / (1.0 - p));
    int64_t kept = 0;
    for (float e : v) {
      if (e != 0.0f) {
        ++kept;
        CHECK(e == doctest::Approx(scale));
      }
    }
    double fraction = double(kept) / double(v.size());
    INFO("p = " << p << ", kept " << fraction);
    CHECK(std::abs(fraction - (1.0 - p)) < 0.01);  // 100k draws: sigma <= 0.0016
    CHECK(gen.offset() == uint64_t(x.numel()));  // took one number per element
  }
}

DEVICE_TEST_CASE("dropout: element i is kept iff random_uniform(seed, first + i) >= p") {
  Generator gen(99);
  gen.take(1000);  // a non-zero starting offset
  Tensor x = randn({37, 29}, gen, Dtype::Float64).to(device);
  const uint64_t seed = gen.seed(), first = gen.offset();
  const double p = 0.3;
  Tensor y = dropout(x, p, true, gen);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    bool keep = random_uniform(seed, first + i) >= p;
    REQUIRE(yv[i] == (keep ? xv[i] * (1.0 / (1.0 - p)) : 0.0));
  }
  // A transposed input: the mask follows logical (row-major) order, not memory order.
  Generator g1(3), g2(3);
  Tensor t = randn({8, 6}, g1, Dtype::Float64).to(device);
  g2.set_state(g1.seed(), g1.offset());
  check_close(dropout(t.transpose(0, 1), 0.5, true, g1), dropout(t.transpose(0, 1).contiguous(), 0.5, true, g2), 0);
}

DEVICE_TEST_CASE("dropout: same generator state, same mask, and the next call a new one") {
  Tensor x = ones({1000}, Dtype::Float32, device);
  Generator a(42), b(42);
  Tensor ya = dropout(x, 0.5, true, a);
  Tensor yb = dropout(x, 0.5, true, b);
  CHECK(ya.to_vector<float>() == yb.to_vector<float>());
  Tensor next = dropout(x, 0.5, true, a);
  CHECK(next.to_vector<float>() != ya.to_vector<float>());
  Generator c(43);
  CHECK(dropout(x, 0.5, true, c).to_vector<float>() != ya.to_vector<float>());
}

TEST_CASE("dropout: identical for 1 and 2 threads") {
  Tensor x = randn({300, 700});
  auto run = [&](int threads) {
    set_num_threads(threads);
    Generator gen(11);
    Tensor xg = x.detach().clone().requires_grad_();
    Tensor y = dropout(xg, 0.25, true, gen);
    y.backward(ones_like(y));
    return std::make_pair(y.to_vector<float>(), xg.grad().to_vector<float>());
  };
  int saved = num_threads();
  auto one = run(1);
  auto two = run(2);
  set_num_threads(saved);
  CHECK(one.first == two.first);
  CHECK(one.second == two.second);
}

DEVICE_TEST_CASE("dropout: eval mode and p == 0 return the input itself, p == 1 zeroes everything") {
  Tensor x = randn({4, 5}).to(device);
  Generator gen(1);
  Tensor eval = dropout(x, 0.5, /*training=*/false, gen);
  CHECK(eval.impl() == x.impl());
  Tensor zero_p = dropout(x, 0.0, true, gen);
  CHECK(zero_p.impl() == x.impl());
  CHECK(gen.offset() == 0);  // nothing was drawn
  Tensor xg = randn({4, 5}, gen, Dtype::Float64).to(device).requires_grad_();
  Tensor all = dropout(xg, 1.0, true, gen);
  check_values(all, std::vector<double>(20, 0.0));
  all.backward(ones_like(all));
  check_values(xg.grad(), std::vector<double>(20, 0.0));
}

DEVICE_TEST_CASE("gradcheck: dropout with a fixed generator seed") {
  // Re-seeded inside f, so every evaluation uses the same mask.
  check_gradient(device, [](auto& in) {
    Generator gen(2024);
    return dropout(in[0], 0.4, true, gen);
  }, {random64({6, 7}, 1)});
  check_gradient(device, [](auto& in) {
    Generator gen(7);
    return dropout(in[0].transpose(0, 1), 0.5, true, gen) * in[1];
  }, {random64({5, 4}, 2), random64({4, 5}, 3)});
  // The gradient is g * mask / (1 - p): 0 or 1 / (1 - p) for a gradient of ones.
  Tensor x = ones({100}, Dtype::Float64, device).requires_grad_();
  Generator gen(5);
  Tensor y = dropout(x, 0.2, true, gen);
  y.backward(ones_like(y));
  std::vector<double> gx = x.grad().to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < gx.size(); ++i) CHECK(gx[i] == yv[i]);  // y = mask * scale too
}

TEST_CASE("dropout: errors") {
  check_error([] { dropout(ones({3}), 1.5, true); }, "dropout: p must be in [0, 1], got 1.5");
  check_error([] { dropout(ones({3}), -0.1, true); }, "dropout: p must be in [0, 1], got -0.1");
  check_error([] { dropout(ones({3}), std::nan(""), true); }, "dropout: p must be in [0, 1]");
  check_error([] { dropout(arange(3), 0.5, true); }, "dropout: expected a floating tensor (float32, float64 or bfloat16), got int64");
}

TEST_CASE("dropout: a Redraw hands out a step's numbers again, then the generator is back where it was") {
  // A CUDA graph's capture runs the step just run again: its masks must be the step's, and the
  // generator must not advance twice (optim/train/graph_step.cpp).
  Generator gen(9);
  gen.take(4);
  const uint64_t first = gen.offset();
  Tensor x = ones({5, 3}, Dtype::Float64);
  Tensor step_mask = dropout(x, 0.5, true, gen);
  const uint64_t after = gen.offset();
  CHECK(after > first);
  {
    const Generator::Redraw redraw(gen, first);
    CHECK(gen.offset() == first);
    check_close(dropout(x, 0.5, true, gen), step_mask, 0);  // the same numbers
    CHECK(gen.offset() == after);
    gen.take(100);  // whatever the capture draws is forgotten
  }
  CHECK(gen.offset() == after);
  CHECK(gen.seed() == 9);
}

TEST_CASE("dropout: a batch slice (data parallelism) draws its rows' part of the whole batch's range") {
  // One process runs the whole batch of 7 rows; three "ranks" run rows [0, 3), [3, 5), [5, 7) and
  // [7, 7) (no rows). Each slice must equal its rows of the whole result, forward and backward, and
  // every generator must end at the same offset, as the one process's.
  Generator whole_gen(5);
  whole_gen.take(11);
  Tensor x = random64({7, 4, 3}, 21);
  Tensor whole = dropout(x, 0.4, true, whole_gen);
  for (auto [first, rows] : {std::pair<int64_t, int64_t>{0, 3}, {3, 2}, {5, 2}, {7, 0}}) {
    Generator gen(5);
    gen.take(11);
    gen.set_batch_slice({7, first, rows});
    Tensor part = x.narrow(0, first, rows).detach().requires_grad_();
    Tensor y = dropout(part, 0.4, true, gen);
    check_close(y, whole.narrow(0, first, rows), 0);
    CHECK(gen.offset() == whole_gen.offset());
    if (rows > 0) {
      sum(y).backward();
      // d/dx = the mask * 1 / (1 - p): nonzero exactly where the output kept the input.
      std::vector<double> g = part.grad().to_vector<double>(), out = y.to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) CHECK((g[i] != 0) == (out[i] != 0));
    }
  }
  Generator gen(5);
  gen.set_batch_slice({7, 0, 3});
  check_error([&] { dropout(ones({4, 2}), 0.5, true, gen); }, "dropout: the generator holds rows [0, 3) of a batch of 7");
}
