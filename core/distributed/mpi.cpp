// The MPI backend: each collective is one non-blocking MPI call on a duplicate of MPI_COMM_WORLD,
// waited for by polling that sleeps between tests, and watched by a watchdog that ends the job
// (MPI_Abort) when a peer does not answer in time.
#include "core/distributed/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "core/distributed/watchdog.h"
#include "core/error.h"

namespace ember::distributed {
namespace {

MPI_Datatype mpi_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return MPI_FLOAT;
    case Dtype::Float64: return MPI_DOUBLE;
    case Dtype::Int32: return MPI_INT32_T;
    case Dtype::Int64: return MPI_INT64_T;
    case Dtype::Bool: return MPI_UINT8_T;
    default: fail("mpi: no MPI type for {} tensors", dtype_name(dtype));
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }  // Average: a sum, then / size

std::string describe(const char* op, const Tensor& t) {
  return fmt::format("{} of {:.2f} MB ({} x {})", op, double(t.numel() * dtype_size(t.dtype())) / 1e6,
                     dtype_name(t.dtype()), t.numel());
}

// MPI counts are ints: a larger tensor goes in pieces of at most this many elements.
constexpr int64_t kMaxCount = INT_MAX / 8;

class MpiProcessGroup final : public ProcessGroup {
 public:
  explicit MpiProcessGroup(double timeout_seconds) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    EMBER_CHECK(!initialized, "mpi: MPI is already initialised (make_mpi_world is called once per process)");
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      fail("mpi: this MPI library gives thread level {}; Ember's communication thread needs at least "
           "MPI_THREAD_SERIALIZED", provided);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);  // errors come back as codes: ember::Error
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    watchdog_ = std::make_unique<Watchdog>(timeout_seconds, [this, timeout_seconds](const std::string& what) {
      abort_job(fmt::format("ember: rank {} of {}: {} did not finish within {} s: a peer process died, hangs, or was "
                            "started with other settings; ending the job (the timeout is --dist-timeout / "
                            "EMBER_DIST_TIMEOUT)", rank_, size_, what, timeout_seconds), 1);
    });
  }

  ~MpiProcessGroup() override {
    stop_communication_thread();
    watchdog_.reset();
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  Device device() const override { return Device::cpu(); }

  [[noreturn]] void abort_job(const std::string& message, int exit_code) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 protected:
  void do_all_reduce(Tensor& t, ReduceOp op) override {
    Watchdog::Scope watch(*watchdog_, describe("all_reduce", t));
    char* data = static_cast<char*>(t.raw_data());
    const int64_t item = dtype_size(t.dtype());
    for (int64_t done = 0; done < t.numel(); done += kMaxCount) {
      const int count = int(std::min(kMaxCount, t.numel() - done));
      MPI_Request request;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + done * item, count, mpi_type(t.dtype()), mpi_op(op), comm_, &request),
            "all_reduce", t);
      wait(request, "all_reduce", t);
    }
    if (op == ReduceOp::Average) divide_by(t, size_);
  }

  void do_broadcast(Tensor& t, int root) override {
    Watchdog::Scope watch(*watchdog_, describe("broadcast", t));
    char* data = static_cast<char*>(t.raw_data());
    const int64_t item = dtype_size(t.dtype());
    for (int64_t done = 0; done < t.numel(); done += kMaxCount) {
      const int count = int(std::min(kMaxCount, t.numel() - done));
      MPI_Request request;
      check(MPI_Ibcast(data + done * item, count, mpi_type(t.dtype()), root, comm_, &request), "broadcast", t);
      wait(request, "broadcast", t);
    }
  }

  void do_all_gather(const Tensor& in, Tensor& out) override {
    Watchdog::Scope watch(*watchdog_, describe("all_gather", in));
    EMBER_CHECK(in.numel() <= kMaxCount, "mpi all_gather: {} elements per rank is more than this backend sends at "
                "once ({})", in.numel(), kMaxCount);
    MPI_Request request;
    check(MPI_Iallgather(in.raw_data(), int(in.numel()), mpi_type(in.dtype()), out.raw_data(), int(in.numel()),
                         mpi_type(in.dtype()), comm_, &request), "all_gather", in);
    wait(request, "all_gather", in);
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    Watchdog::Scope watch(*watchdog_, describe("reduce_scatter", in));
    EMBER_CHECK(out.numel() <= kMaxCount, "mpi reduce_scatter: {} elements per rank is more than this backend sends "
                "at once ({})", out.numel(), kMaxCount);
    MPI_Request request;
    check(MPI_Ireduce_scatter_block(in.raw_data(), out.raw_data(), int(out.numel()), mpi_type(in.dtype()),
                                    mpi_op(op), comm_, &request), "reduce_scatter", in);
    wait(request, "reduce_scatter", in);
    if (op == ReduceOp::Average) divide_by(out, size_);
  }

  void do_barrier() override {
    Watchdog::Scope watch(*watchdog_, "barrier");
    MPI_Request request;
    check(MPI_Ibarrier(comm_, &request), "barrier", Tensor());
    wait(request, "barrier", Tensor());
  }

 private:
  // Waits for a non-blocking collective. MPI_Test also makes the progress (Open MPI has no
  // progress thread), so it is called in a loop; after a short spin the loop sleeps between tests.
  // NOTE: a blocking MPI call would spin at full speed while a slower peer catches up, taking
  // the core from this rank's own computation (backward, on the same core, during overlap).
  void wait(MPI_Request& request, const char* op, const Tensor& t) const {
    int done = 0;
    for (int tests = 0;; ++tests) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), op, t);
      if (done) return;
      if (tests >= kSpinTests) std::this_thread::sleep_for(std::chrono::microseconds(kSleepMicroseconds));
    }
  }
  static constexpr int kSpinTests = 100;
  static constexpr int kSleepMicroseconds = 50;

  void check(int code, const char* op, const Tensor& t) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fail("mpi {} (rank {} of {}{}): {}", op, rank_, size_, t.defined() ? ", " + describe(op, t) : std::string(),
         std::string(text, size_t(length)));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

bool built_with_mpi() { return true; }

std::unique_ptr<ProcessGroup> make_mpi_world(double timeout_seconds) {
  return std::make_unique<MpiProcessGroup>(timeout_seconds);
}

}  // namespace ember::distributed
