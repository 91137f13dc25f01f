// The CUDA device plumbing: allocation, copies both ways, the fill kernel. Skipped without a GPU.
#include "core/allocator.h"
#include "cuda_skip.h"
#include "helpers.h"

using namespace ember;
using namespace ember::testing;

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
  if (cuda_device_count() > 0) return;
  check_error([] { zeros({2}).to(Device::cuda(0)); }, "CUDA");
}
