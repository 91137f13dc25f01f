// The NCCL group on GPU tensors (in CI: two processes on the CUDA emulator, each with an emulated
// GPU, their data moved by the emulator's nccl.h): collectives against the same formulas as the
// MPI tests, the side-stream all-reduce, and data parallelism and ZeRO-1 on GPUs taking the same
// steps as on CPUs over MPI.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/distributed/nccl.h"
#include "core/distributed/world.h"
#include "dist_helpers.h"
#include "helpers.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/sharded_adamw.h"

using namespace ember;
using namespace ember::testing;
using distributed::ReduceOp;

namespace {

// Without NCCL or a GPU these cases are reported as skipped.
bool no_nccl_gpu() { return !distributed::built_with_nccl() || cuda_device_count() == 0; }

// The NCCL group of this rank's GPU.
std::unique_ptr<distributed::ProcessGroup> nccl_group() {
  const Device device = distributed::device_for_local_rank(distributed::launch_info().local_rank);
  return distributed::make_nccl_group(world(), device, 60);
}

}  // namespace

TEST_CASE("nccl: all_reduce, broadcast, all_gather and reduce_scatter on GPU tensors" * doctest::skip(no_nccl_gpu())) {
  auto nccl = nccl_group();
  const int n = nccl->size(), r = nccl->rank();
  const Device gpu = nccl->device();
  CHECK(nccl->backend() == "nccl");
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max}) {
    Tensor t = (arange(0, 300000, 1, Dtype::Float32) + 1.0) * double(r + 1);
    Tensor x = t.to(gpu);
    nccl->all_reduce(x, op);
    const double factor = op == ReduceOp::Max ? n : op == ReduceOp::Sum ? n * (n + 1) / 2.0 : (n + 1) / 2.0;
    check_close(x.to(Device::cpu()), (arange(0, 300000, 1, Dtype::Float32) + 1.0) * factor, 1e-6);
  }
  Tensor b = full({5}, double(r + 7), Dtype::Float64, gpu);
  nccl->broadcast(b, n - 1);
  check_values(b.to(Device::cpu()), std::vector<double>(5, double(n + 6)), 0);
  Tensor in = full({3}, double(r), Dtype::Int64, gpu), out = zeros({3 * n}, Dtype::Int64, gpu);
  nccl->all_gather(in, out);
  std::vector<double> gathered;
  for (int q = 0; q < n; ++q) gathered.insert(gathered.end(), 3, double(q));
  check_values(out.to(Device::cpu()), gathered, 0);
  Tensor chunks = (arange(0, 4 * n, 1, Dtype::Float32) + double(r)).to(gpu), mine = zeros({4}, Dtype::Float32, gpu);
  nccl->reduce_scatter(chunks, mine, ReduceOp::Sum);
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(n * (n - 1) / 2.0 + double(n) * (r * 4 + i));
  check_values(mine.to(Device::cpu()), expected, 0);
  // Started on the side stream, finished (and `then` run) by wait_all.
  Tensor late = ones({1000}, Dtype::Float32, gpu);
  bool ran = false;
  nccl->start_all_reduce(late, ReduceOp::Sum, [&] { ran = true; });
  nccl->wait_all();
  CHECK(ran);
  check_values(late.to(Device::cpu()).narrow(0, 0, 3), {double(n), double(n), double(n)}, 0);
  nccl->barrier();
  check_error([&] { Tensor cpu = zeros({2}); nccl->all_reduce(cpu); }, "nccl all_reduce: the tensor is on cpu");
}

TEST_CASE("nccl: data parallelism and ZeRO-1 on GPUs take the same steps as on CPUs over MPI" *
          doctest::skip(no_nccl_gpu())) {
  auto nccl = nccl_group();
  for (bool sharded : {false, true}) {
    INFO("ZeRO-1: " << sharded);
    std::vector<std::vector<Tensor>> results;
    for (distributed::ProcessGroup* group : {&world(), nccl.get()}) {
      Generator gen(31);
      nn::TransformerClassifier model(small_model(), gen);
      model.to(group->device());
      nn::DataParallel dp(model, *group, {/*bucket_bytes=*/1024, /*overlap=*/true, /*reduce_gradients=*/!sharded});
      std::unique_ptr<optim::Optimizer> optimizer;
      if (sharded) optimizer = std::make_unique<optim::ShardedAdamW>(std::vector<optim::ParamGroup>{{model.parameters(), 0.01}}, *group, 1e-2, 0.5);
      else optimizer = std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup>{{model.parameters(), 0.01}}, 1e-2);
      for (int step = 0; step < 3; ++step) {
        SmallBatch batch = small_batch(6, 40 + step);
        distributed::Range rows = distributed::shard_range(6, group->rank(), group->size());
        gen.set_batch_slice({6, rows.begin, rows.size()});
        SmallBatch local = batch.rows(rows.begin, rows.size());
        Tensor loss = cross_entropy(model.forward(local.tokens.to(group->device()), local.padding.to(group->device())),
                                    local.labels.to(group->device()));
        optimizer->zero_grad();
        (loss * (double(rows.size()) * group->size() / 6.0)).backward();
        dp.synchronize_gradients();
        optimizer->step();
      }
      std::vector<Tensor> ps;
      for (const Tensor& p : model.parameters()) ps.push_back(p.to(Device::cpu()));
      results.push_back(ps);
    }
    for (size_t k = 0; k < results[0].size(); ++k) {
      INFO("parameter " << k);
      check_close(results[1][k], results[0][k], 1e-5);
      CHECK(same_on_every_rank(results[1][k]));
    }
  }
}
