// The CUDA paths at the edges: every op on zero-size dims (tests/zero_size_cases.h), attention rows
// that see no key (fused and composed, against the CPU), and backward's seed on the wrong device.
// Skipped, with the reason printed, where there is no GPU; CI runs them on the emulator.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda_ops.h"
#include "tests/cuda_skip.h"
#include "tests/helpers.h"
#include "tests/zero_size_cases.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

// Runs fn with the fused attention kernels switched on, then puts back the choice it found.
template <typename Fn>
void with_fused_attention(Fn&& fn) {
  AttentionKernels fused(true);
  fn();
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

TEST_CASE("cuda edges: attention queries that see no key give 0 and no gradient, fused and composed, like the CPU") {
  if (skip_without_cuda()) return;
  // Review 1 is all padding; review 0 has leading padding, so with the causal mask its first queries
  // see nothing either. T = 37 and head size 16: tails in every tile.
  const int64_t B = 2, T = 37, D = 32;
  Tensor mask = zeros({B, T}, Dtype::Bool);
  for (int64_t t = 0; t < T; ++t) mask.data<bool>()[t] = t < 5 || t > 30;
  for (int64_t t = 0; t < T; ++t) mask.data<bool>()[T + t] = true;
  Generator gen(7);
  Tensor qkv = uniform({B, T, 3 * D}, -2, 2, gen);
  Tensor g = uniform({B, T, D}, -1, 1, gen);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    Tensor cpu_in = qkv.clone().requires_grad_(), weights_cpu;
    Tensor out_cpu = attention(cpu_in, 2, mask, causal, &weights_cpu);
    sum(out_cpu * g).backward();
    check_values(out_cpu.select(0, 1), std::vector<double>(size_t(T * D), 0.0), 0);
    check_values(cpu_in.grad().select(0, 1), std::vector<double>(size_t(T * 3 * D), 0.0), 0);
    auto on_gpu = [&](const char* which) {
      INFO(which);
      Tensor gpu_in = qkv.to(kGpu).requires_grad_(), weights_gpu;
      Tensor out_gpu = attention(gpu_in, 2, mask.to(kGpu), causal, &weights_gpu);
      sum(out_gpu * g.to(kGpu)).backward();
      check_close(out_gpu.to(Device::cpu()), out_cpu, 1e-5);
      check_close(weights_gpu.to(Device::cpu()), weights_cpu, 1e-5);
      check_close(gpu_in.grad().to(Device::cpu()), cpu_in.grad(), 1e-5);
      check_values(out_gpu.select(0, 1).to(Device::cpu()), std::vector<double>(size_t(T * D), 0.0), 0);
      check_values(gpu_in.grad().select(0, 1).to(Device::cpu()), std::vector<double>(size_t(T * 3 * D), 0.0), 0);
    };
    on_gpu("composed");
    with_fused_attention([&] { on_gpu("fused"); });
  }
}
