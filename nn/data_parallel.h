// Data parallelism: the same model in every process of a group, each process computing gradients
// on its own slice of the batch. The gradients are averaged over the processes while backward is
// still running, so that every process takes the same optimiser step and the parameters stay
// identical (bit for bit) on every rank. Works for any set of parameters, on any backend.
//
// Usage:
//   nn::DataParallel dp(model.parameters(), world);  // rank 0's parameters copied to every rank
//   for (each step) {
//     Tensor loss = ...;                   // on this rank's slice of the batch
//     optimizer.zero_grad();
//     loss.backward();                     // buckets are all-reduced as their gradients become ready
//     dp.synchronize_gradients();          // the rest, and wait: .grad is now the average over ranks
//     optimizer.step();
//   }
// NOTE: each rank's gradient counts 1/size. Ranks with unequal slices of a batch (say 11, 11 and 10
// rows of 32) scale their loss by rows * size / batch first, so that the average is the gradient
// of the whole batch's mean loss (examples/imdb/trainer.cpp does).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/hooks.h"
#include "core/distributed/process_group.h"
#include "nn/module.h"

namespace ember::nn {

struct DataParallelOptions {
  // Gradients travel in buckets of about this many bytes, filled in reverse parameter order (the
  // order backward produces them); a larger parameter gets a bucket of its own.
  int64_t bucket_bytes = 256 * 1024;
  // Send each bucket as soon as every gradient in it is ready, during backward (on the group's
  // communication thread, or side stream on a GPU). false: all of them after backward, for
  // comparison; the buckets and results are the same.
  bool overlap = true;
  // false: gradients are left as each rank computed them (only the start-up broadcast is done):
  // a sharded optimiser reduces them itself (optim/sharded_adamw.h).
  bool reduce_gradients = true;
  // A parameter with at least this many rows (an embedding table; 0 = never) sends only the rows
  // some rank's gradient touched: each rank marks its non-zero rows, the marks are all-reduced
  // (max), and the marked rows alone are packed and all-reduced. The result is the dense
  // all-reduce's, bit for bit (a row no rank touched is +0 everywhere either way); the bytes sent
  // are the rows a batch uses, not the whole table. CPU groups only.
  int64_t sparse_min_rows = 4096;
};

// Totals over the steps so far, for the benchmark and the trainer's log (CPU groups; on a GPU the
// communication runs on a stream and is not timed here).
struct DataParallelStats {
  int64_t steps = 0;
  int64_t bytes = 0;             // gradient bytes all-reduced by this rank (its buffers' size)
  int64_t early_buckets = 0;     // buckets sent from backward's hooks, before synchronize_gradients()
  int64_t collectives = 0;       // all-reduce calls (a sparse bucket makes two: its row marks, its rows)
  double comm_seconds = 0;       // time the all-reduces took on the communication thread
  double exposed_seconds = 0;    // time synchronize_gradients() blocked: what backward did not hide
  double hidden_share() const { return comm_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / comm_seconds) : 0; }
};

class DataParallel {
 public:
  // Checks that every rank has the same parameters (count, shapes, dtypes) and options, then
  // broadcasts rank 0's values to every rank. Collective: every rank constructs it together.
  DataParallel(std::vector<Tensor> parameters, distributed::ProcessGroup& group, DataParallelOptions options = {});
  DataParallel(const Module& module, distributed::ProcessGroup& group, DataParallelOptions options = {})
      : DataParallel(module.parameters(), group, options) {}
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // After backward() (or instead of it, on a rank with no rows this step): sends the buckets not
  // yet sent (a parameter that got no gradient counts as zeros) and waits for all of them. Then
  // every parameter's .grad is the average over the ranks, identical on each. Collective.
  void synchronize_gradients();

  // Throws on every rank when any rank's parameters differ, bit for bit, from rank 0's: the check
  // that the ranks still train one model (the trainer makes it at each checkpoint). Collective.
  void check_replicas_agree();

  int num_buckets() const { return int(buckets_.size()); }
  const DataParallelStats& stats() const { return stats_; }
  const DataParallelOptions& options() const { return options_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_, in the order they fill the buffer
    std::vector<int64_t> offsets; // where each starts in the buffer (elements)
    int64_t numel = 0;
    Dtype dtype = Dtype::Float32;
    Tensor buffer;                // flat send buffer, allocated once
    size_t ready = 0;             // parameters whose gradient is ready this step
    Tensor touched;               // sparse buckets (one parameter): per row, whether any rank's gradient is non-zero
  };

  void check_same_on_every_rank();
  void broadcast_parameters();
  void on_ready(size_t param);
  void launch_ready_buckets(bool from_hook);
  void launch(Bucket& bucket);
  void unflatten(Bucket& bucket, double submitted);
  void launch_sparse(Bucket& bucket);
  void reduce_touched_rows(Bucket& bucket, double submitted);

  std::vector<Tensor> params_;
  distributed::ProcessGroup& group_;
  DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;       // per parameter
  std::vector<char> ready_;             // per parameter, this step
  size_t next_launch_ = 0;              // buckets are sent in order: the same on every rank
  std::vector<GradHookHandle> hooks_;
  DataParallelStats stats_;
  double comm_thread_free_at_ = 0;      // when the communication thread finished its last bucket
};

}  // namespace ember::nn
