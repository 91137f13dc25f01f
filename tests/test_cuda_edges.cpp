// The CUDA paths at the edges: every op on zero-size dims (tests/zero_size_cases.h), and backward's
// seed on the wrong device.
// Skipped, with the reason printed, where there is no GPU; CI runs them on the emulator.
#include "core/cuda_ops.h"
#include "cuda_skip.h"
#include "helpers.h"
#include "zero_size_cases.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

// Runs fn with the fused attention kernels switched on, then off again whatever happens.
template <typename Fn>
void with_fused_attention(Fn&& fn) {
  cuda::set_attention_fused(true);
  try {
    fn();
  } catch (...) {
    cuda::set_attention_fused(false);
    throw;
  }
  cuda::set_attention_fused(false);
}

}  // namespace

TEST_CASE("cuda edges: backward refuses a gradient on another device than the output, naming both") {
  if (skip_without_cuda()) return;
  Tensor x = tensor({1, 2, 3}).to(kGpu).requires_grad_();
  check_error([&] { exp(x).backward(ones({3})); }, "the gradient is on cpu but the output [3] is on cuda:0");
  check_error([&] { (x * x).backward(ones({3})); }, "expected a gradient on cuda:0");
  Tensor c = tensor({1, 2, 3}).requires_grad_();
  check_error([&] { exp(c).backward(ones({3}, Dtype::Float32, kGpu)); },
              "the gradient is on cuda:0 but the output [3] is on cpu");
  check_error([&] { sum(c).backward(ones({}, Dtype::Float32, kGpu)); }, "expected a gradient on cpu");
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("cuda edges: zero-size dims through every op on the GPU, composed and fused attention") {
  if (skip_without_cuda()) return;
  run_zero_size_cases(kGpu);
  with_fused_attention([] { run_zero_size_cases(kGpu); });
}
