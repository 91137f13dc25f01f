// The CUDA device plumbing: allocation, copies both ways, the fill kernel. Skipped without a GPU.
#include <cstddef>
#include <iterator>
#include <vector>

#include "core/allocator.h"
#include "core/unary_math.h"
#include "tests/cuda_skip.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

#define EMBER_COUNT_OP(...) +1

TEST_CASE("cuda: tensors move to the GPU and back unchanged, and the fill kernel writes every element") {
  if (skip_without_cuda()) return;
  Generator gen(3);
  Tensor x = randn({1000, 37}, gen);
  Tensor on_gpu = x.to(Device::cuda(0));
  CHECK(on_gpu.device() == Device::cuda(0));
  CHECK(on_gpu.to(Device::cpu()).to_vector<float>() == x.to_vector<float>());
  Tensor filled = Tensor::empty({100003}, Dtype::Float32, Device::cuda(0));
  filled.fill_(2.5);
  check_values(filled.to(Device::cpu()), std::vector<double>(100003, 2.5));
  CHECK(memory_stats(Device::cuda(0)).allocated > 0);
  check_error([] { zeros({2}).to(Device::cuda(99)); }, "cuda:99");
}

TEST_CASE("cuda: without a GPU, asking for one is a clear error") {
  if (cuda_device_count() > 0) return skip_test("this process has a CUDA device (the no-GPU path is tested without one)");
  check_error([] { zeros({2}).to(Device::cuda(0)); }, "CUDA");
}

// The element-wise kernels of cuda/unary_kernels.cu against the CPU loop: same functors, so the
// values and the gradients must agree to rounding, for float32 and float64. One row per entry of
// EMBER_UNARY_OPS (core/unary_math.h), generated: a new op is tested here from its first commit.
TEST_CASE("cuda: every element-wise math op and its backward match the CPU") {
  if (skip_without_cuda()) return;
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double low, high;
  };
#define EMBER_UNARY_CASE(name, Functor, low, high) {#name, [](const Tensor& x) { return ember::name(x); }, low, high},
  const Case cases[] = {
      EMBER_UNARY_OPS(EMBER_UNARY_CASE)
      // The ops with a parameter (EMBER_UNARY_PARAM_OPS), each with one:
      {"pow", [](const Tensor& x) { return pow(x, 1.5); }, 0.1, 3},
      {"add_scalar", [](const Tensor& x) { return add_scalar(x, 0.25); }, -3, 3},
      {"mul_scalar", [](const Tensor& x) { return mul_scalar(x, -1.5); }, -3, 3},
  };
#undef EMBER_UNARY_CASE
  // Every functor the CUDA kernels are made for has a row above.
  CHECK(std::size(cases) == size_t(0 EMBER_UNARY_OPS(EMBER_COUNT_OP) EMBER_UNARY_PARAM_OPS(EMBER_COUNT_OP)));
  for (Dtype dtype : {Dtype::Float32, Dtype::Float64}) {
    for (const Case& c : cases) {
      INFO(c.name << " " << dtype_name(dtype));
      Generator gen(11);
      Tensor x = uniform({3, 1001}, c.low, c.high, gen, dtype);
      Tensor grad = uniform({3, 1001}, -1, 1, gen, dtype);
      Tensor x_cpu = x.clone().requires_grad_();
      Tensor y_cpu = c.op(x_cpu);
      y_cpu.backward(grad);

      Tensor x_gpu = x.to(Device::cuda(0)).requires_grad_();
      Tensor y_gpu = c.op(x_gpu);
      CHECK(y_gpu.device() == Device::cuda(0));
      y_gpu.backward(grad.to(Device::cuda(0)));
      double tol = dtype == Dtype::Float32 ? 1e-5 : 1e-12;
      check_close(y_gpu.to(Device::cpu()), y_cpu, tol);
      check_close(x_gpu.grad().to(Device::cpu()), x_cpu.grad(), tol);
    }
  }
}
