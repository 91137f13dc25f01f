// chunk, split and unbind, and the backward of slices (autograd/node.h's GradWindow): the pieces as
// PyTorch cuts them (uneven, empty, too many chunks), views of the input's storage, float64 gradient checks
// (pieces used once, twice, not at all, on strided and computed inputs), windows added into one buffer
// (overlapping, mixed with whole gradients, a second backward, gradient-ready hooks), what the backward of
// three chunks of a [B, T, 3 D] tensor allocates (one input-sized buffer), and the errors.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

namespace {

std::vector<Shape> shapes_of(const std::vector<Tensor>& pieces) {
  std::vector<Shape> shapes;
  for (const Tensor& p : pieces) shapes.push_back(p.shape());
  return shapes;
}

bool shares_storage(const Tensor& a, const Tensor& b) { return a.impl()->storage == b.impl()->storage; }

}  // namespace

TEST_CASE("chunk, split, unbind: the pieces PyTorch cuts") {
  const Tensor x = arange(10).reshape({2, 5});
  CHECK(shapes_of(chunk(x, 2, 1)) == std::vector<Shape>{{2, 3}, {2, 2}});
  CHECK(shapes_of(chunk(x, 3, -1)) == std::vector<Shape>{{2, 2}, {2, 2}, {2, 1}});
  CHECK(shapes_of(chunk(x, 4, 1)) == std::vector<Shape>{{2, 2}, {2, 2}, {2, 1}});  // ceil(5 / 4) = 2: 3 pieces
  CHECK(shapes_of(chunk(x, 9, 0)) == std::vector<Shape>{{1, 5}, {1, 5}});
  CHECK(shapes_of(chunk(x, INT64_MAX, 1)).size() == 5);  // one piece per element
  CHECK(shapes_of(chunk(zeros({0, 3}), 3)) == std::vector<Shape>{{0, 3}, {0, 3}, {0, 3}});
  check_values(chunk(x, 3, 1)[1], {2, 3, 7, 8}, 0);
  check_values(chunk(x, 3, 1)[2], {4, 9}, 0);
  CHECK(shapes_of(split(x, 2, 1)) == std::vector<Shape>{{2, 2}, {2, 2}, {2, 1}});
  CHECK(shapes_of(split(x, 7, 1)) == std::vector<Shape>{{2, 5}});
  CHECK(shapes_of(split(zeros({0}), 2)) == std::vector<Shape>{{0}});
  CHECK(shapes_of(split(zeros({0}), 0)) == std::vector<Shape>{{0}});
  CHECK(shapes_of(split(x, std::vector<int64_t>{1, 0, 4}, 1)) == std::vector<Shape>{{2, 1}, {2, 0}, {2, 4}});
  CHECK(shapes_of(split(x, {3, 2}, -1)) == std::vector<Shape>{{2, 3}, {2, 2}});
  check_values(split(x, {3, 2}, -1)[1], {3, 4, 8, 9}, 0);
  CHECK(shapes_of(split(x, std::vector<int64_t>{5}, 1)) == std::vector<Shape>{{2, 5}});
  const std::vector<Tensor> rows = unbind(x);
  REQUIRE(rows.size() == 2);
  check_values(rows[1], {5, 6, 7, 8, 9}, 0);
  const std::vector<Tensor> cols = unbind(x, -1);
  REQUIRE(cols.size() == 5);
  CHECK(cols[3].shape() == Shape{2});
  check_values(cols[3], {3, 8}, 0);
  CHECK(unbind(zeros({2, 0}), 1).empty());
  CHECK(unbind(zeros({0, 2})).empty());
}

DEVICE_TEST_CASE("chunk, split, unbind: views of the input's storage, on every device and dtype") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Int64, Dtype::Bool, Dtype::BFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor x = arange(24).reshape({2, 3, 4}).to(dtype).to(device);
    const std::vector<Tensor> pieces = chunk(x, 2, -1);
    for (const Tensor& p : pieces) CHECK(shares_storage(p, x));
    for (const Tensor& p : split(x, {1, 2}, 1)) CHECK(shares_storage(p, x));
    for (const Tensor& p : unbind(x, 1)) CHECK(shares_storage(p, x));
    check_close(cat(chunk(x, 3, -1), -1).to(Dtype::Float64), x.to(Dtype::Float64), 0);
    check_close(stack(unbind(x, 2), 2).to(Dtype::Float64), x.to(Dtype::Float64), 0);
    check_close(cat(split(x.transpose(0, 2), 3, 1), 1).to(Dtype::Float64), x.transpose(0, 2).to(Dtype::Float64), 0);
  }
  // A write into the input shows in its pieces (no copy was made).
  Tensor x = zeros({2, 6}, Dtype::Float32, device);
  const std::vector<Tensor> q = chunk(x, 3, 1);
  x.fill_(5.0);
  check_values(q[2], {5, 5, 5, 5}, 0);
}

DEVICE_TEST_CASE("gradcheck: chunk, split and unbind, pieces used once, twice and not at all") {
  check_gradient(device, [](auto& in) {
    auto p = chunk(in[0], 3, -1);  // [2, 2] each
    return p[0] * 2.0 + p[1] * p[2];
  }, {random64({2, 6}, 1)});
  check_gradient(device, [](auto& in) {
    auto p = split(in[0], {1, 3, 2}, 1);
    return cat({p[2] * 3.0, p[0], p[1] * p[1]}, 1);  // the gradient of p[2] lands in columns 4 and 5
  }, {random64({3, 6}, 2)});
  check_gradient(device, [](auto& in) {
    auto p = split(in[0], 2, 0);  // [2, 3], [2, 3], [1, 3]
    return p[1] * p[1] + p[1];    // p[0] and p[2] unused: their rows get 0
  }, {random64({5, 3}, 3)});
  check_gradient(device, [](auto& in) {
    auto rows = unbind(in[0], 1);
    return stack({rows[2], rows[0] * rows[1], rows[2] * 4.0}, 0);
  }, {random64({2, 3}, 4)});
  // A strided input, and a computed one (the pieces' buffer goes to its node, not a leaf).
  check_gradient(device, [](auto& in) {
    auto p = chunk(in[0].transpose(0, 1), 2, 1);
    return p[0] - p[1] * 0.5;
  }, {random64({4, 3}, 5)});
  check_gradient(device, [](auto& in) {
    auto p = chunk(in[0] * in[0], 3, 0);
    return cat({p[2], p[1] * p[0]}, 1);
  }, {random64({6, 2}, 6)});
  // The seeds' q, k, v = chunk(qkv, 3, -1), heads split, scores = q k^T.
  check_gradient(device, [](auto& in) {
    auto qkv = chunk(in[0], 3, -1);
    return matmul(qkv[0], qkv[1].transpose(1, 2)) + sum(qkv[2], {-1}, true);
  }, {random64({2, 3, 6}, 7)});
}

DEVICE_TEST_CASE("slices' backward: windows added into one buffer, overlapping, mixed with whole gradients") {
  const auto leaf = [&](const Shape& shape, uint64_t seed) { return random64(shape, seed).to(device).requires_grad_(); };
  {  // Overlapping windows add up.
    Tensor x = leaf({2, 5}, 1);
    (sum(x.narrow(1, 0, 3)) + sum(x.narrow(1, 2, 3) * 2.0)).backward();
    check_values(x.grad(), {1, 1, 3, 2, 2, 1, 1, 3, 2, 2}, 0);
  }
  {  // A window and a whole gradient, into a computed input, in either order.
    for (const bool window_first : {true, false}) {
      Tensor x = leaf({2, 4}, 2);
      Tensor y = x * 1.0;  // a node whose pending gradient collects both
      Tensor piece = y.narrow(0, 1, 1) * 5.0, whole = y * 3.0;
      Tensor loss = window_first ? sum(piece) + sum(whole) : sum(whole) + sum(piece);
      loss.backward();
      check_values(x.grad(), {3, 3, 3, 3, 8, 8, 8, 8}, 0);
    }
  }
  {  // A second backward through the same graph adds into the leaf's gradient again.
    Tensor x = leaf({6}, 3);
    auto p = chunk(x, 3);
    Tensor loss = sum(p[0]) + sum(p[2] * 2.0);
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();
    check_values(x.grad(), {2, 2, 0, 0, 4, 4}, 0);
  }
  {  // unbind's pieces: select = narrow + squeeze, each row one window.
    Tensor x = leaf({3, 2}, 4);
    auto rows = unbind(x);
    sum(rows[0] + rows[2] * 3.0).backward();
    check_values(x.grad(), {1, 1, 0, 0, 3, 3}, 0);
  }
  {  // A gradient-ready hook sees the leaf's gradient once, complete (every window added).
    Tensor x = leaf({2, 6}, 5);
    int calls = 0;
    std::vector<double> seen;
    GradHookHandle hook = on_grad_ready(x, [&](const Tensor& t) {
      ++calls;
      seen = t.grad().to(Device::cpu()).to_vector<double>();
    });
    auto p = chunk(x, 3, 1);
    sum(p[0] + p[1] * 2.0 + p[2] * 3.0).backward();
    CHECK(calls == 1);
    CHECK(seen == std::vector<double>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  }
  {  // A narrow over the whole dim sends the gradient as it is (no window).
    Tensor x = leaf({2, 3}, 6);
    Tensor all = x.narrow(1, 0, 3);
    REQUIRE(all.grad_fn() != nullptr);
    CHECK(!all.grad_fn()->inputs[0].window.active());
    CHECK(x.narrow(1, 1, 2).grad_fn()->inputs[0].window.active());
  }
}

DEVICE_TEST_CASE("slices' backward: three chunks of a [B, T, 3 D] tensor allocate one input-sized buffer, not three") {
  const int64_t B = 4, T = 64, D = 128;
  const int64_t bytes = B * T * 3 * D * 4;  // float32
  // What one backward allocates at its peak beyond what is held before it, for the chunks of x.
  const auto peak_of_backward = [&](const Tensor& x, const Tensor& leaf) {
    auto qkv = chunk(x, 3, -1);
    Tensor loss = sum(qkv[0]) + sum(qkv[1]) * 2.0 + sum(qkv[2]) * 3.0;  // each piece's gradient a broadcast view
    allocator_for(device).release_cached();  // a request must not get a larger cached block (counted at its size)
    const int64_t before = memory_stats(device).allocated;
    reset_peak_memory(device);
    loss.backward();
    const int64_t peak = memory_stats(device).peak_allocated - before;
    std::vector<double> g = leaf.grad().to(Device::cpu()).to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      const double expected = 1.0 + double(int64_t(i) % (3 * D) / D);
      if (g[i] != expected * (x.is_leaf() ? 1.0 : 2.0)) {
        FAIL_CHECK("gradient element " << i << " is " << g[i]);
        break;
      }
    }
    return peak;
  };
  Tensor x = zeros({B, T, 3 * D}, Dtype::Float32, device).requires_grad_();
  const int64_t leaf_peak = peak_of_backward(x, x);
  MESSAGE("on " << device.str() << ", a leaf input: " << leaf_peak << " bytes at the peak; the input is " << bytes);
  CHECK(leaf_peak >= bytes);            // the gradient itself
  CHECK(leaf_peak < bytes + bytes / 4);  // and nothing else input-sized (a zero buffer per piece was 3 of them)
  // A computed input: its node gets the one buffer, and its own backward makes the leaf's gradient.
  Tensor w = zeros({B, T, 3 * D}, Dtype::Float32, device).requires_grad_();
  const int64_t computed_peak = peak_of_backward(w * 2.0, w);
  MESSAGE("on " << device.str() << ", a computed input: " << computed_peak << " bytes at the peak");
  CHECK(computed_peak < 2 * bytes + bytes / 4);  // the pieces' buffer and w's gradient
}

TEST_CASE("chunk, split, unbind: errors") {
  const Tensor x = zeros({2, 5});
  check_error([&] { chunk(x, 0, 1); }, "chunk: the number of chunks must be positive, got 0");
  check_error([&] { chunk(x, 2, 2); }, "chunk: dim 2 out of range for a tensor with 2 dims");
  check_error([] { chunk(scalar(1.0), 2); }, "chunk: expected a tensor with at least 1 dim, got a 0-dim tensor");
  check_error([] { chunk(Tensor(), 2); }, "chunk: the input tensor is undefined");
  check_error([&] { split(x, 0, 1); }, "split: split_size must be positive (0 only for an empty dim), got 0 for dim 1 of size 5");
  check_error([&] { split(x, -2, 1); }, "split: split_size must be positive");
  check_error([&] { split(x, {2, 2}, 1); }, "split: sizes [2, 2] sum to 4, but dim 1 has size 5 (shape [2, 5])");
  check_error([&] { split(x, {6, -1}, 1); }, "split: sizes [6, -1] has a negative size");
  check_error([&] { split(x, {2}, -3); }, "split: dim -3 out of range for a tensor with 2 dims");
  check_error([] { unbind(scalar(1.0)); }, "unbind: expected a tensor with at least 1 dim, got a 0-dim tensor");
  check_error([&] { unbind(x, 3); }, "unbind: dim 3 out of range");
}
