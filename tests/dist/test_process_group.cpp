// The process group's collectives on the world (MPI under mpirun, or one process): values against
// formulas in the rank, every dtype they take, uneven sizes, the local checks' errors.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/distributed/world.h"
#include "dist_helpers.h"
#include "helpers.h"

using namespace ember;
using namespace ember::testing;
using distributed::ReduceOp;

TEST_CASE("process group: rank and size are the launcher's") {
  distributed::LaunchInfo info = distributed::launch_info();
  CHECK(world().size() == (info.launched ? info.size : 1));
  CHECK(world().rank() == (info.launched ? info.rank : 0));
  CHECK(world().device() == Device::cpu());
}

TEST_CASE("process group: shard_range splits as evenly as possible, the first ranks one more") {
  std::vector<std::pair<int64_t, int64_t>> ten_over_three;
  for (int r = 0; r < 3; ++r) {
    distributed::Range range = distributed::shard_range(10, r, 3);
    ten_over_three.emplace_back(range.begin, range.end);
  }
  CHECK(ten_over_three == std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 7}, {7, 10}});
  CHECK(distributed::shard_range(1, 1, 2).size() == 0);  // a rank can get nothing
  CHECK(distributed::shard_range(0, 0, 3).size() == 0);
}

TEST_CASE("process group: all_reduce sum, average and max, float32 / float64 / int32 / int64") {
  const int r = world().rank(), n = world().size();
  // Rank r holds x_i = (r + 1) * (i + 1); the sum over ranks is n (n + 1) / 2 * (i + 1).
  for (int64_t size : {int64_t(1), int64_t(5), int64_t(1000003)}) {
    std::vector<double> mine(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) mine[size_t(i)] = double(r + 1) * double(i % 97 + 1);
    for (Dtype dtype : {Dtype::Float32, Dtype::Float64, Dtype::Int32, Dtype::Int64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max}) {
        if (op == ReduceOp::Average && !is_floating(dtype)) continue;
        Tensor t = from_vector(mine, {size}).to(dtype);
        world().all_reduce(t, op);
        std::vector<double> got = t.to(Dtype::Float64).to_vector<double>();
        const double factor = op == ReduceOp::Max ? n : op == ReduceOp::Sum ? n * (n + 1) / 2.0 : (n + 1) / 2.0;
        bool all = true;
        for (int64_t i = 0; i < size; ++i) all = all && got[size_t(i)] == factor * double(i % 97 + 1);
        INFO("dtype " << dtype_name(dtype) << ", op " << distributed::reduce_op_name(op) << ", size " << size);
        CHECK(all);
      }
    }
  }
}

TEST_CASE("process group: broadcast from every root") {
  for (int root = 0; root < world().size(); ++root) {
    Tensor t = full({3, 4}, double(world().rank() * 10 + 1), Dtype::Float64);
    world().broadcast(t, root);
    check_values(t, std::vector<double>(12, double(root * 10 + 1)), 0);
  }
  Tensor b = gt(from_vector(std::vector<float>{world().rank() == 0 ? 1.f : 0.f, 1.f}), zeros({2}));
  world().broadcast(b, 0);
  check_values(b, {1, 1}, 0);
}

TEST_CASE("process group: all_gather puts each rank's part in rank order") {
  const int n = world().size();
  Tensor in = (arange(0, 7, 1, Dtype::Float64) + 100.0 * world().rank()).to(Dtype::Int64);
  Tensor out = Tensor::empty({n, 7}, Dtype::Int64);
  world().all_gather(in, out);
  std::vector<double> expected;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 7; ++i) expected.push_back(100.0 * r + i);
  check_values(out, expected, 0);
}

TEST_CASE("process group: reduce_scatter gives rank r the sum of chunk r") {
  const int n = world().size(), r = world().rank();
  const int64_t chunk = 5;
  // Rank q holds in[j] = q + j; chunk r of the sum is sum_q (q + r * chunk + i).
  Tensor in = arange(0, n * chunk, 1, Dtype::Float32) + double(r);
  Tensor out = Tensor::empty({chunk}, Dtype::Float32);
  world().reduce_scatter(in, out, ReduceOp::Sum);
  std::vector<double> expected;
  for (int64_t i = 0; i < chunk; ++i) expected.push_back(n * (n - 1) / 2.0 + double(n) * double(r * chunk + i));
  check_values(out, expected, 0);
  world().reduce_scatter(in, out, ReduceOp::Average);
  for (double& e : expected) e /= n;
  check_values(out, expected, 1e-7);
}

TEST_CASE("process group: start_all_reduce runs `then` after the sum, in order; wait_all waits for all") {
  std::vector<Tensor> buffers;
  std::vector<int> order;
  for (int k = 0; k < 4; ++k) buffers.push_back(full({1000}, double(k + 1)));
  for (int k = 0; k < 4; ++k) world().start_all_reduce(buffers[size_t(k)], ReduceOp::Sum, [&order, k] { order.push_back(k); });
  world().wait_all();
  CHECK(order == std::vector<int>{0, 1, 2, 3});
  for (int k = 0; k < 4; ++k) check_values(buffers[size_t(k)].narrow(0, 0, 2), {double((k + 1) * world().size()), double((k + 1) * world().size())}, 0);
  world().barrier();
}

TEST_CASE("process group: bad tensors are errors naming the collective, before anything is sent") {
  Tensor t = zeros({4, 4});
  check_error([&] { Tensor x = t.transpose(0, 1); world().all_reduce(x); }, "all_reduce: the tensor (shape [4, 4]) must be contiguous");
  check_error([&] { Tensor x = zeros({2}, Dtype::Int64); world().all_reduce(x, ReduceOp::Average); }, "an average of int64 tensors");
  check_error([&] { Tensor out = zeros({3}); world().all_gather(t, out); }, "all_gather: the output");
  check_error([&] { Tensor out = zeros({3}); world().reduce_scatter(t, out); }, "reduce_scatter: the input");
  check_error([&] { world().broadcast(t, world().size()); }, "is not a rank of a group of");
  world().barrier();  // every rank threw the same errors and sent nothing
}
