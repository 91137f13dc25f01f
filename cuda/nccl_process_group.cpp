// The NCCL backend: NCCL's collectives on GPU tensors, on the device's current stream, or on a side
// stream for the all-reduces started during backward. The unique id travels over the bootstrap group.
// NOTE: compiled by CI and run there on the CPU emulator (tests/cuda_emulator/nccl.h), not yet on a GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/creation.h"
#include "core/distributed/nccl.h"
#include "core/error.h"
#include "cuda/launch.h"

namespace ember::distributed {
namespace {

#define EMBER_NCCL_CHECK(call)                                                                     \
  do {                                                                                             \
    ncclResult_t ember_nccl_ = (call);                                                             \
    if (ember_nccl_ != ncclSuccess) fail("NCCL error: {} failed at {}:{}: {}", #call, __FILE__, __LINE__, \
                                         ncclGetErrorString(ember_nccl_));                         \
  } while (0)

ncclDataType_t nccl_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return ncclFloat32;
    case Dtype::Float64: return ncclFloat64;
    case Dtype::Int32: return ncclInt32;
    case Dtype::Int64: return ncclInt64;
    case Dtype::Bool: return ncclUint8;
    default: fail("nccl: no NCCL type for {} tensors", dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Average: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(ProcessGroup& bootstrap, Device device, double timeout_seconds)
      : bootstrap_(bootstrap), device_(device), timeout_(timeout_seconds) {
    EMBER_CHECK(device.is_cuda() && device.index < cuda_device_count(), "nccl: {} is not a GPU of this machine ({} "
                "found)", device.str(), cuda_device_count());
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (bootstrap.rank() == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor bytes = Tensor::empty({int64_t(sizeof id + 7) / 8}, Dtype::Int64);  // the id's bytes as words
    std::memcpy(bytes.raw_data(), &id, sizeof id);
    bootstrap.broadcast(bytes, 0);
    std::memcpy(&id, bytes.raw_data(), sizeof id);
    EMBER_CUDA_CHECK(cudaSetDevice(device.index));
    EMBER_NCCL_CHECK(ncclCommInitRank(&comm_, bootstrap.size(), id, bootstrap.rank()));
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
  }

  ~NcclProcessGroup() override {
    cudaSetDevice(device_.index);
    cudaStreamSynchronize(side_);
    cudaEventDestroy(compute_ready_);
    cudaEventDestroy(side_done_);
    cudaStreamDestroy(side_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return device_; }

  // On the side stream, after everything queued so far on the current one (the gradients).
  void start_all_reduce(Tensor t, ReduceOp op, std::function<void()> then) override {
    cudaStream_t compute = cuda::use_device(device_.index);
    EMBER_CUDA_CHECK(cudaEventRecord(compute_ready_, compute));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(side_, compute_ready_, 0));
    EMBER_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                                   comm_, side_));
    in_flight_.push_back(std::move(t));
    if (then) thens_.push_back(std::move(then));
  }

  // The current stream waits for the side stream; the host waits too (at most the timeout), so
  // that a dead peer ends the job instead of hanging it. Then the `then`s run, in order.
  void wait_all() override {
    if (in_flight_.empty() && thens_.empty()) return;
    cudaStream_t compute = cuda::use_device(device_.index);
    EMBER_CUDA_CHECK(cudaEventRecord(side_done_, side_));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(compute, side_done_, 0));
    wait_for(side_done_, "the all-reduces started during backward");
    in_flight_.clear();
    std::vector<std::function<void()>> thens = std::move(thens_);
    thens_.clear();
    for (auto& then : thens) then();
  }

  [[noreturn]] void abort_job(const std::string& message, int exit_code) override {
    ncclCommAbort(comm_);
    bootstrap_.abort_job(message, exit_code);
    std::_Exit(exit_code);  // not reached: abort_job ends the process
  }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    EMBER_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                                   comm_, cuda::use_device(device_.index)));
  }
  void do_broadcast(Tensor& t, int root) override {
    EMBER_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_,
                                   cuda::use_device(device_.index)));
  }
  void do_all_gather(const Tensor& in, Tensor& out) override {
    EMBER_NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), size_t(in.numel()), nccl_type(in.dtype()), comm_,
                                   cuda::use_device(device_.index)));
  }
  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    EMBER_NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(), size_t(out.numel()), nccl_type(in.dtype()),
                                       nccl_op(op), comm_, cuda::use_device(device_.index)));
  }
  void do_barrier() override {
    Tensor one = ones({1}, Dtype::Float32, device_);
    do_all_reduce(one, ReduceOp::Sum);
    cudaEvent_t done = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(done, cuda::use_device(device_.index)));
    wait_for(done, "barrier");
    cudaEventDestroy(done);
  }

 private:
  // Polls the event until it completes; NCCL's asynchronous errors and the timeout end the job.
  void wait_for(cudaEvent_t event, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
    while (true) {
      cudaError_t status = cudaEventQuery(event);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) EMBER_CUDA_CHECK(status);
      cudaGetLastError();  // NOTE: "not ready" is also the last error: cleared, or the next launch's check reports it
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess)
        abort_job(fmt::format("ember: rank {} of {} (nccl): {} failed: {}", rank(), size(), what,
                              ncclGetErrorString(async)), 1);
      if (timeout_ > 0 && std::chrono::steady_clock::now() > deadline)
        abort_job(fmt::format("ember: rank {} of {} (nccl): {} did not finish within {} s: a peer process died, hangs, "
                              "or was started with other settings; ending the job", rank(), size(), what, timeout_), 1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  ProcessGroup& bootstrap_;
  Device device_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr, side_done_ = nullptr;
  std::vector<Tensor> in_flight_;             // kept alive until wait_all()
  std::vector<std::function<void()>> thens_;  // run by wait_all()
};

}  // namespace

bool built_with_nccl() { return true; }

std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, Device device, double timeout_seconds) {
  return std::make_unique<NcclProcessGroup>(bootstrap, device, timeout_seconds);
}

Device device_for_local_rank(int local_rank) {
  const int count = cuda_device_count();
  return count > 0 ? Device::cuda(local_rank % count) : Device::cpu();
}

}  // namespace ember::distributed
