// A process group: this process's rank among the processes of a job, and the collectives that
// data-parallel training needs, on Ember tensors. Backends: one process (world.h), MPI for CPU
// tensors (mpi.h), NCCL for GPU tensors (nccl.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace ember::distributed {

class CommThread;

enum class ReduceOp { Sum, Average, Max };
const char* reduce_op_name(ReduceOp op);

// The part [begin, end) of n items that rank `rank` of `size` holds: as even as possible, the
// first n % size ranks one item more (10 over 3 ranks: [0, 4), [4, 7), [7, 10)).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range shard_range(int64_t n, int rank, int size);

// Every collective must be called by every rank of the group, in the same order, with tensors of
// the same dtype and element count (contiguous, on device()). A rank that breaks this (or dies)
// makes the others fail: MPI's watchdog ends the job after the group's timeout (never a hang).
class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single", "mpi", "nccl"
  virtual Device device() const = 0;        // where the tensors of its collectives live

  // ---- Collectives; each returns when its result is in place (on a GPU: when it is queued
  // on the device's current stream, so that later work on that stream sees the result).
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);                        // in place
  void broadcast(Tensor& t, int root = 0);                                         // root's t to all
  void all_gather(const Tensor& in, Tensor& out);             // out: size() * in.numel(), rank order
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum);  // in: size() chunks
  void barrier();

  // ---- Overlap: an all-reduce that runs while the caller goes on (data parallelism sends
  // gradient buckets during backward this way). start_all_reduce() queues it and returns at
  // once; `then` runs when its result is in t. wait_all() returns when every queued one is done
  // and rethrows the first failure. Until then, t must not be touched, and no other collective
  // may be called on this group (it would race the queued ones for the order of collectives).
  // By default a communication thread runs them in order (MPI), `then` on that thread; NCCL
  // queues them on a side stream and runs `then` in wait_all().
  virtual void start_all_reduce(Tensor t, ReduceOp op, std::function<void()> then = {});
  virtual void wait_all();

  // Ends every process of the job at once (MPI_Abort), after `message` on stderr: for errors
  // after which the collectives of the ranks can no longer match. Never returns.
  [[noreturn]] virtual void abort_job(const std::string& message, int exit_code = 1);

 protected:
  ProcessGroup();
  virtual void do_all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void do_broadcast(Tensor& t, int root) = 0;
  virtual void do_all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void do_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  virtual void do_barrier() = 0;
  // Joins the communication thread: derived destructors call it before they tear down the
  // backend the thread may still be using.
  void stop_communication_thread();

 private:
  void check_not_overlapping(const char* op) const;
  std::unique_ptr<CommThread> thread_;
};

// Divides a floating tensor by the group size in place (ReduceOp::Average after a sum).
void divide_by(Tensor& t, int size);

}  // namespace ember::distributed
