// GpuEvent (core/copy_stream.h): the Tensor-free side is in cuda/runtime.cu.
#include "core/copy_stream.h"

#include <utility>

#include "core/cuda_ops.h"
#include "core/error.h"

namespace ember {

GpuEvent::GpuEvent(Device device) : device_(device) {
  EMBER_CHECK(device.is_cuda() && device.index < cuda_device_count(), "GpuEvent: {} is not an available GPU",
              device.str());
  event_ = cuda::event_create(device.index);
}

GpuEvent::~GpuEvent() {
  if (event_ != nullptr) cuda::event_destroy(event_);
}

GpuEvent::GpuEvent(GpuEvent&& other) noexcept
    : device_(other.device_), event_(std::exchange(other.event_, nullptr)),
      recorded_(std::exchange(other.recorded_, false)) {}

GpuEvent& GpuEvent::operator=(GpuEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cuda::event_destroy(event_);
    device_ = other.device_;
    event_ = std::exchange(other.event_, nullptr);
    recorded_ = std::exchange(other.recorded_, false);
  }
  return *this;
}

void GpuEvent::record(GpuStream stream) {
  EMBER_CHECK(event_ != nullptr, "GpuEvent::record: the event was moved from");
  cuda::event_record(device_.index, stream == GpuStream::Copy, event_);
  recorded_ = true;
}

void GpuEvent::wait(GpuStream stream) const {
  if (!recorded_) return;
  cuda::stream_wait_event(device_.index, stream == GpuStream::Copy, event_);
}

bool GpuEvent::query() const { return !recorded_ || cuda::event_query(event_); }

}  // namespace ember
