// The next batch, uploaded while the current step runs (docs/cuda.md, "The next batch, uploaded during the
// step"): the batch's named arrays are checked on the host and copied to the GPU on its copy stream
// (core/copy_stream.h), into one of two sets of GPU buffers, while the compute stream runs the step before it.
// Events order the two on the GPU; the host never waits.
//
//   train::Prefetcher prefetcher(device, layout, {{"tokens", B * T}, {"labels", B}, ...});
//   prefetcher.prefetch(batch_0);
//   for (n = 0; ...) {
//     const train::DeviceBatch& inputs = prefetcher.take();  // the step waits (on the GPU) for its upload
//     Tensor loss = step_on_device(model, optimizer, loss_of, inputs, clip);  // or GraphStep::run(inputs)
//     prefetcher.release();                                  // the step that reads `inputs` is queued
//     prefetcher.prefetch(batch_n_plus_1);                   // its upload runs during step n
//   }
//
// Slot k % 2 holds batch k. Before batch k + 2 overwrites it, the copy stream waits for the step that read batch k;
// the compute stream waits for batch k's upload before its step. The host copies each batch into pinned staging
// blocks (cuda/runtime.cu), each reused only once the copy that read it is done (its event), never by waiting.
// Each slot's buffers for an array are made at its first batch, for `capacity` elements (its largest batch's); an
// array larger than them gets new ones. An upload into new buffers waits for the GPU work queued before it (a block
// the allocator hands out may still be in use by queued work, in the compute stream's order): a slot's first batch,
// and a batch that outgrew its buffers, go up after the step before them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/copy_stream.h"
#include "core/device.h"
#include "optim/train/batch.h"

namespace ember::train {

class Prefetcher {
 public:
  // Buffers on `device` (a GPU) for arrays of up to capacity[name] elements (an array not named there: sized by
  // its first batch).
  Prefetcher(Device device, Layout layout, const std::map<std::string, int64_t>& capacity = {});
  // NOTE: the buffers go back to the caching allocator, which hands blocks out in the compute stream's order:
  // the compute stream first waits (on the GPU) for an upload still queued.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Checks the batch on the host (ids within their bounds) and queues its upload on the copy stream. The host
  // does not wait. The batch prefetched before must have been taken.
  void prefetch(const Batch& batch);
  // The prefetched batch, for the step about to be queued: the compute stream waits (on the GPU) for its upload.
  // Valid until the prefetch after next.
  const DeviceBatch& take();
  // The step that reads the taken batch is queued: its buffers are free once that work is done.
  void release();

  bool has_prefetched() const { return prefetched_ > taken_; }
  int64_t uploads() const { return prefetched_; }
  // Recorded on the copy stream after the last prefetched batch's upload (tests poll it).
  const GpuEvent& last_upload() const { return slots_[size_t((prefetched_ + 1) % 2)].uploaded; }

 private:
  struct Buffers {
    Tensor values, buckets;  // flat: `capacity` elements, and an ids array's buckets (3 capacity + 2)
    int64_t capacity = 0;
  };
  struct Slot {
    std::map<std::string, Buffers> buffers;
    DeviceBatch view;             // views of the last batch's shapes into the buffers
    GpuEvent uploaded, read;
    explicit Slot(Device device) : uploaded(device), read(device) {}
  };
  void point_views(Slot& slot, const std::string& name, const Tensor& host);

  Device device_;
  Layout layout_;
  std::map<std::string, int64_t> capacity_;
  std::array<Slot, 2> slots_;
  int64_t prefetched_ = 0, taken_ = 0, released_ = 0;
};

}  // namespace ember::train
