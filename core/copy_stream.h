// A GPU's copy stream: host-to-device uploads that run while the compute stream (where every op
// runs) works, ordered against it by events on the GPU, so that the host never waits for either
// (docs/cuda.md, "The next batch, uploaded during the step").
//
//   GpuEvent uploaded(gpu), read(gpu);
//   read.wait(GpuStream::Copy);                      // the copy waits for the last reader of `slot`
//   upload_into(slot, host, bytes, GpuStream::Copy);
//   uploaded.record(GpuStream::Copy);
//   uploaded.wait(GpuStream::Compute);               // the step waits for the upload
//   ... the step's ops, reading `slot` ...
//   read.record(GpuStream::Compute);
#pragma once
#include "core/device.h"
#include "core/gpu_stream.h"

namespace ember {

// A CUDA event of one GPU: a point in the work queued on one of its streams.
class GpuEvent {
 public:
  explicit GpuEvent(Device device);  // a GPU
  ~GpuEvent();
  GpuEvent(GpuEvent&& other) noexcept;
  GpuEvent& operator=(GpuEvent&& other) noexcept;
  GpuEvent(const GpuEvent&) = delete;
  GpuEvent& operator=(const GpuEvent&) = delete;

  // Marks the end of the work queued on `stream` so far.
  void record(GpuStream stream);
  // Work queued on `stream` from now on starts after the recorded work is done (the GPU waits, the
  // host does not). Nothing to wait for before the first record().
  void wait(GpuStream stream) const;
  bool recorded() const { return recorded_; }
  // Whether the recorded work is done (true before any record), without waiting.
  bool query() const;

 private:
  Device device_;
  void* event_ = nullptr;
  bool recorded_ = false;
};

}  // namespace ember
