// The GPU's side of core/kernels.h's element-wise kernels, counted by the emulator (counters.h): a
// unary op copies a strided input into a contiguous scratch block with one copy launch (no more than
// x.contiguous() made before), a contiguous one costs the op's launch alone, and both give the CPU's
// bits; a copy launched for the backward's gradient is not launched again for the operand standing
// in for it; and what the GPU's kernels cannot take (more than 8 dims, float16) is refused naming the
// op. Built into ember_tests_emulated only.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "counters.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda(0);

// The kernel launches fn makes.
template <typename Fn>
int64_t launches(Fn&& fn) {
  ember_emu::reset_counts();
  fn();
  return ember_emu::counts().kernel_launches;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * dtype_size(x.dtype())) == 0;
}

}  // namespace

TEST_CASE("element-wise kernels on the GPU: a strided unary input costs one copy launch, a contiguous one none; the CPU's bits") {
  Generator gen(7);
  const Tensor host = uniform({6, 5}, -2, 2, gen);
  const Tensor x = host.to(kGpu);
  Tensor y_contiguous, y_strided;
  CHECK(launches([&] { y_contiguous = tanh(x); }) == 1);
  CHECK(launches([&] { y_strided = tanh(x.transpose(0, 1)); }) == 2);  // the copy into scratch, then tanh
  CHECK(same_bits(y_contiguous, tanh(host)));
  CHECK(same_bits(y_strided, tanh(host.transpose(0, 1))));
  CHECK(y_strided.is_contiguous());

  // A broadcast (stride 0) input is copied the same way; an empty one launches nothing.
  const Tensor row = uniform({1, 5}, -2, 2, gen);
  Tensor y_broadcast;
  CHECK(launches([&] { y_broadcast = exp(row.to(kGpu).expand({4, 5})); }) == 2);
  CHECK(same_bits(y_broadcast, exp(row.expand({4, 5}))));
  CHECK(launches([&] { (void)exp(Tensor::empty({0, 3}, Dtype::Float32, kGpu)); }) == 0);
}

TEST_CASE("element-wise kernels on the GPU: the backward copies a strided gradient once, though it also stands for x and y") {
  // neg's derivative reads neither x nor y: the gradient stands in for both (core/kernels.h), and the
  // GPU copies it once, not three times: a transposed gradient costs one launch more than a
  // contiguous one, and both give the CPU's bits.
  Generator gen(8);
  const Tensor host = uniform({5, 4}, -2, 2, gen);
  const Tensor g_host = uniform({5, 4}, -1, 1, gen), gt_host = uniform({4, 5}, -1, 1, gen);
  const Tensor g = g_host.to(kGpu), gt = gt_host.to(kGpu).transpose(0, 1);
  Tensor x1 = host.to(kGpu).requires_grad_(), x2 = host.to(kGpu).requires_grad_();
  const Tensor y1 = neg(x1), y2 = neg(x2);
  const int64_t contiguous_launches = launches([&] { y1.backward(g); });
  const int64_t strided_launches = launches([&] { y2.backward(gt); });
  CHECK(strided_launches == contiguous_launches + 1);
  Tensor c1 = host.clone().requires_grad_(), c2 = host.clone().requires_grad_();
  neg(c1).backward(g_host);
  neg(c2).backward(gt_host.transpose(0, 1));
  CHECK(same_bits(x1.grad(), c1.grad()));
  CHECK(same_bits(x2.grad(), c2.grad()));
}

TEST_CASE("element-wise kernels on the GPU: more than 8 dims and float16 are refused, naming the op") {
  const Shape nine = {1, 1, 1, 1, 1, 1, 1, 2, 3};
  CHECK_THROWS_WITH_AS(zeros(nine, Dtype::Float32, kGpu),
                       doctest::Contains("fill_: CUDA kernels take at most 8 dims, got shape [1, 1, 1, 1, 1, 1, 1, 2, 3]"),
                       ember::Error);
  const Tensor a = Tensor::empty(nine, Dtype::Float32, kGpu);
  CHECK_THROWS_WITH_AS(add(a, a), doctest::Contains("add: CUDA kernels take at most 8 dims"), ember::Error);
  CHECK_THROWS_WITH_AS(exp(a.transpose(0, 8)), doctest::Contains("copy: CUDA kernels take at most 8 dims"),
                       ember::Error);
  // The same shape on the CPU is fine: its loops take any number of dims.
  CHECK(sum(zeros(nine)).item<float>() == 0.0f);

  const Tensor half = Tensor::empty({3}, Dtype::Float16, kGpu);
  CHECK_THROWS_WITH_AS(Tensor(half).fill_(1.0), doctest::Contains("fill_: dtype float16 has no CUDA kernels yet"),
                       ember::Error);
}
