// rms_norm (the op added in docs/adding-an-op.md): values worked out by hand, the limits of float32,
// the fused op against a composition of existing ops, float64 gradient checks on plain, broadcast and
// strided inputs, zero-size inputs, errors, a dweight independent of the thread count, what its backward
// reads (its row of the saved-tensor walk), and the CUDA kernels against the CPU, errors included (run on
// the CUDA emulator in CI, skipped without a GPU elsewhere).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "tests/cuda_skip.h"
#include "tests/helpers.h"
#include "tests/saved_tensor_rows.h"

using namespace ember;
using namespace ember::testing;

namespace {

// The plain composition: x * rsqrt(mean(x^2) + eps) * weight over the last dim.
Tensor reference_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor y = x * rsqrt(mean(x * x, {-1}, true) + eps);
  return weight.defined() ? y * weight : y;
}

}  // namespace

// Its row of the saved-tensor walk (tests/autograd/test_saved_tensors.cpp, on each device): the backward
// reads x and weight, so changing either in place before backward is an error naming rms_norm.
SAVED_TENSOR_ROWS(rms_norm) {
  rows.expect("rms_norm", {random64({2, 3}, 1), random64({3}, 9)}, [](In in) { return rms_norm(in[0], in[1]); },
              {Read::Yes, Read::Yes});
}

TEST_CASE("rms_norm: values by hand, the float32 limits, and the composed reference") {
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    // [3, 4]: mean(x^2) = 12.5, so y = x / sqrt(12.5) = [0.848528..., 1.131370...];
    // [1, -1]: mean(x^2) = 1, so y = x.
    Tensor x = tensor({3, 4, 1, -1}, {2, 2}, dtype);
    const double r = 1 / std::sqrt(12.5);
    check_values(rms_norm(x, Tensor(), 0.0), {3 * r, 4 * r, 1, -1}, 1e-6);
    check_values(rms_norm(x, tensor({2, 0.5}, {}, dtype), 0.0), {6 * r, 2 * r, 2, -0.5}, 1e-6);
    // The default eps (1e-6) is added to mean(x^2).
    const double re = 1 / std::sqrt(12.5 + 1e-6), r1 = 1 / std::sqrt(1 + 1e-6);
    check_values(rms_norm(x, Tensor()), {3 * re, 4 * re, r1, -r1}, 1e-7);
    CHECK(rms_norm(x, Tensor()).dtype() == dtype);
    // A zero row stays zero with eps > 0; with eps = 0 it is 0 / 0 (NaN, as in PyTorch).
    check_values(rms_norm(zeros({1, 3}, dtype), Tensor()), {0, 0, 0});
    CHECK(std::isnan(rms_norm(zeros({1, 3}, dtype), Tensor(), 0.0).to(Dtype::Float64).to_vector<double>()[0]));
  }
  // float32 at its limits: mean(x^2) is taken in double, so 1e20 (whose square overflows float) and
  // 1e-30 (whose square underflows it) both normalise to 1.
  check_values(rms_norm(tensor({1e20f, -1e20f, 1e-30f, 1e-30f}, {2, 2}), Tensor(), 0.0), {1, -1, 1, 1}, 1e-6);
  // Against the composition, on a 3-D input with a weight.
  Tensor x = random64({2, 3, 5}, 1, -2, 2), w = random64({5}, 2, -2, 2);
  check_close(rms_norm(x, w, 1e-3), reference_rms_norm(x, w, 1e-3), 1e-12);
}

TEST_CASE("rms_norm: float64 gradients on plain, broadcast and strided inputs, against finite differences") {
  Tensor x = random64({4, 6}, 11, -2, 2), w = random64({6}, 12, -2, 2), row = random64({6}, 13, -2, 2);
  check_gradient([](auto& in) { return rms_norm(in[0], in[1], 1e-3); }, {x.clone(), w.clone()});
  check_gradient([](auto& in) { return rms_norm(in[0], Tensor(), 1e-3); }, {x.clone()});
  check_gradient([](auto& in) { return rms_norm(in[0].expand({3, 6}), in[1], 1e-3); }, {row.clone(), w.clone()});
  check_gradient([](auto& in) { return rms_norm(in[0].transpose(0, 1), in[1], 1e-3); },
                 {random64({6, 4}, 14, -2, 2), random64({6}, 15, -2, 2)});
  // The same gradients as the composition, for a large row (D = 300) in float32.
  Tensor xf = random64({5, 300}, 16, -3, 3).to(Dtype::Float32), wf = random64({300}, 17, -2, 2).to(Dtype::Float32);
  Tensor probe = random64({5, 300}, 18).to(Dtype::Float32);
  Tensor a = xf.clone().requires_grad_(), aw = wf.clone().requires_grad_();
  Tensor b = xf.clone().requires_grad_(), bw = wf.clone().requires_grad_();
  sum(rms_norm(a, aw) * probe).backward();
  sum(reference_rms_norm(b, bw, 1e-6) * probe).backward();
  check_close(a.grad(), b.grad(), 1e-5);
  check_close(aw.grad(), bw.grad(), 1e-5);
}

TEST_CASE("rms_norm: zero-size inputs, and errors that name the problem") {
  // No rows: an empty result, and a zero gradient for the weight.
  Tensor empty = zeros({2, 0, 4}).requires_grad_(), w = ones({4}).requires_grad_();
  Tensor y = rms_norm(empty, w);
  CHECK(y.shape() == Shape({2, 0, 4}));
  sum(y).backward();
  CHECK(empty.grad().shape() == Shape({2, 0, 4}));
  check_values(w.grad(), {0, 0, 0, 0});
  check_error([] { rms_norm(zeros({3, 0}), Tensor()); }, "rms_norm: the last dim of input [3, 0] is empty");
  check_error([] { rms_norm(scalar(1.0), Tensor()); }, "rms_norm: the input must have at least 1 dim");
  check_error([] { rms_norm(zeros({2, 3}, Dtype::Int64), Tensor()); }, "rms_norm: expected a floating input");
  check_error([] { rms_norm(zeros({2, 3}), ones({4})); }, "rms_norm: weight shape [4] does not match the last dim 3");
  check_error([] { rms_norm(zeros({2, 3}), ones({3}, Dtype::Float64)); }, "rms_norm: weight dtype float64 differs");
  check_error([] { rms_norm(zeros({2, 3}), Tensor(), -1.0); }, "rms_norm: eps must be finite and >= 0");
  check_error([] { rms_norm(zeros({2, 3}), Tensor(), std::numeric_limits<double>::quiet_NaN()); }, "eps");
  check_error([] { rms_norm(Tensor(), Tensor()); }, "rms_norm: the input tensor is undefined");
}

TEST_CASE("rms_norm: dweight is the same bits for any thread count") {
  Tensor x = random64({300, 33}, 21, -2, 2).to(Dtype::Float32), w = random64({33}, 22).to(Dtype::Float32);
  Tensor probe = random64({300, 33}, 23).to(Dtype::Float32);
  auto dweight = [&](int threads) {
    set_num_threads(threads);
    Tensor wr = w.clone().requires_grad_();
    sum(rms_norm(x, wr) * probe).backward();
    return wr.grad().to_vector<float>();
  };
  const int before = num_threads();
  std::vector<float> one = dweight(1), two = dweight(2), five = dweight(5);
  set_num_threads(before);
  CHECK(one == two);
  CHECK(one == five);
}

CUDA_TEST_CASE("cuda ops: rms_norm's CUDA kernels match the CPU, values and gradients") {
  const Device gpu = Device::cuda(0);
  struct Case {
    Shape shape;
    bool weight, transposed;
  };
  // D above the block's 256 threads, rows over one 64-row chunk of dweight, a transposed input, no
  // weight; rows of up to 1024 run a warp each (an odd 33, the limit), longer ones a block (1500).
  const Case cases[] = {{{3, 7}, true, false},    {{2, 5, 300}, true, false}, {{130, 8}, true, false},
                        {{9, 6}, true, true},     {{4, 10}, false, false},    {{11, 33}, true, false},
                        {{3, 1024}, true, false}, {{3, 1500}, true, false},   {{2, 1500}, false, false}};
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    const double tol = dtype == Dtype::Float32 ? 1e-5 : 1e-12;
    uint64_t seed = 30;
    for (const Case& c : cases) {
      INFO(shape_str(c.shape) << " " << dtype_name(dtype) << (c.weight ? " weight" : "")
                              << (c.transposed ? " transposed" : ""));
      Tensor x = random64(c.shape, ++seed, -3, 3).to(dtype);
      Tensor w = c.weight ? random64({c.shape.back()}, ++seed, -2, 2).to(dtype) : Tensor();
      Tensor probe = random64(c.shape, ++seed).to(dtype);
      Tensor xc = x.clone().requires_grad_(), xg = x.to(gpu).requires_grad_();
      Tensor wc = c.weight ? w.clone().requires_grad_() : Tensor();
      Tensor wg = c.weight ? w.to(gpu).requires_grad_() : Tensor();
      auto input = [&](const Tensor& t) { return c.transposed ? t.transpose(0, 1).contiguous().transpose(0, 1) : t; };
      Tensor yc = rms_norm(input(xc), wc), yg = rms_norm(input(xg), wg);
      REQUIRE(yg.device() == gpu);
      check_close(yg.to(Device::cpu()), yc, tol);
      sum(yc * probe).backward();
      sum(yg * probe.to(gpu)).backward();
      check_close(xg.grad().to(Device::cpu()), xc.grad(), tol);
      if (c.weight) check_close(wg.grad().to(Device::cpu()), wc.grad(), tol);
    }
  }
  // The float32 limits on the GPU as on the CPU: 1e20 (its square overflows a float) and 1e-30 (its
  // square underflows) normalise to 1 (eps 0), short rows (a warp each) and long ones (a block).
  for (int64_t D : {4, 1030}) {
    INFO("float32 limits, D = " << D);
    std::vector<float> big(size_t(2 * D));
    for (int64_t j = 0; j < D; ++j) big[size_t(j)] = j % 2 == 0 ? 1e20f : -1e20f, big[size_t(D + j)] = 1e-30f;
    Tensor x = from_vector(big, {2, D});
    check_close(rms_norm(x.to(gpu), Tensor(), 0.0).to(Device::cpu()), rms_norm(x, Tensor(), 0.0), 1e-6);
  }
  // A bad input gets the CPU's error on the GPU too: the op checks, not the kernels.
  for (Device d : {Device::cpu(), gpu})
    check_error([&] { rms_norm(zeros({2, 3}, Dtype::Float32, d), ones({4}, Dtype::Float32, d)); },
                "rms_norm: weight shape [4] does not match the last dim 3 of input [2, 3]");
  // Zero rows on the GPU too: an empty result and a zero dweight.
  Tensor w = ones({4}, Dtype::Float32, gpu).requires_grad_();
  sum(rms_norm(zeros({0, 4}, Dtype::Float32, gpu), w)).backward();
  check_values(w.grad().to(Device::cpu()), {0, 0, 0, 0});
}
