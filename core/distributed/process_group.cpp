// The process group's checks, shared by every backend, and the default overlap (a communication thread).
#include "core/distributed/process_group.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/distributed/comm_thread.h"
#include "core/error.h"

namespace ember::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Average: return "average";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

Range shard_range(int64_t n, int rank, int size) {
  EMBER_CHECK(size >= 1 && rank >= 0 && rank < size && n >= 0, "shard_range: rank {} of {} over {} items", rank, size,
              n);
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

namespace {

void check_tensor(const ProcessGroup& group, const char* op, const Tensor& t, const char* what = "tensor") {
  EMBER_CHECK(t.defined(), "{} {}: the {} is undefined", group.backend(), op, what);
  EMBER_CHECK(t.device() == group.device(), "{} {}: the {} is on {}, the group's collectives take tensors on {}{}",
              group.backend(), op, what, t.device().str(), group.device().str(),
              t.device().is_cuda() ? " (GPU tensors go through an NCCL group: distributed/nccl.h)" : "");
  EMBER_CHECK(t.is_contiguous(), "{} {}: the {} (shape {}) must be contiguous", group.backend(), op, what,
              shape_str(t.shape()));
  EMBER_CHECK(t.dtype() != Dtype::BFloat16 && t.dtype() != Dtype::Float16, "{} {}: {} tensors are not supported",
              group.backend(), op, dtype_name(t.dtype()));
}

void check_reduce(const ProcessGroup& group, const char* op, const Tensor& t, ReduceOp reduce) {
  EMBER_CHECK(reduce == ReduceOp::Max || t.dtype() != Dtype::Bool, "{} {}: a {} of bool tensors (use max)",
              group.backend(), op, reduce_op_name(reduce));
  EMBER_CHECK(reduce != ReduceOp::Average || is_floating(t.dtype()), "{} {}: an average of {} tensors",
              group.backend(), op, dtype_name(t.dtype()));
}

}  // namespace

ProcessGroup::ProcessGroup() = default;
ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::stop_communication_thread() { thread_.reset(); }

void ProcessGroup::check_not_overlapping(const char* op) const {
  EMBER_CHECK(thread_ == nullptr || thread_->is_current() || !thread_->busy(),
              "{} {}: called while started all-reduces are in flight; call wait_all() first (the collectives "
              "of the ranks would no longer be in the same order)", backend(), op);
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_tensor(*this, "all_reduce", t);
  check_reduce(*this, "all_reduce", t, op);
  check_not_overlapping("all_reduce");
  do_all_reduce(t, op);
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  check_tensor(*this, "broadcast", t);
  EMBER_CHECK(root >= 0 && root < size(), "{} broadcast: root {} is not a rank of a group of {}", backend(), root,
              size());
  check_not_overlapping("broadcast");
  do_broadcast(t, root);
}

void ProcessGroup::all_gather(const Tensor& in, Tensor& out) {
  check_tensor(*this, "all_gather", in, "input");
  check_tensor(*this, "all_gather", out, "output");
  EMBER_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * size(),
              "all_gather: the output ({}, shape {}) must hold {} x the input ({}, shape {})", dtype_name(out.dtype()),
              shape_str(out.shape()), size(), dtype_name(in.dtype()), shape_str(in.shape()));
  check_not_overlapping("all_gather");
  do_all_gather(in, out);
}

void ProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_tensor(*this, "reduce_scatter", in, "input");
  check_tensor(*this, "reduce_scatter", out, "output");
  check_reduce(*this, "reduce_scatter", in, op);
  EMBER_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * size(),
              "reduce_scatter: the input ({}, shape {}) must hold {} x the output ({}, shape {})",
              dtype_name(in.dtype()), shape_str(in.shape()), size(), dtype_name(out.dtype()), shape_str(out.shape()));
  check_not_overlapping("reduce_scatter");
  do_reduce_scatter(in, out, op);
}

void ProcessGroup::barrier() {
  check_not_overlapping("barrier");
  do_barrier();
}

void ProcessGroup::start_all_reduce(Tensor t, ReduceOp op, std::function<void()> then) {
  check_tensor(*this, "start_all_reduce", t);
  check_reduce(*this, "start_all_reduce", t, op);
  if (!thread_) thread_ = std::make_unique<CommThread>();
  thread_->submit([this, t = std::move(t), op, then = std::move(then)]() mutable {
      do_all_reduce(t, op);
    if (then) then();
  });
}

void ProcessGroup::wait_all() {
  if (thread_) thread_->wait_all();
}

void ProcessGroup::abort_job(const std::string& message, int exit_code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(exit_code);
}

void divide_by(Tensor& t, int size) {
  if (size != 1) t.mul_(1.0 / double(size));
}

}  // namespace ember::distributed
