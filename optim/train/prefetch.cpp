// Prefetcher (optim/train/prefetch.h): two sets of GPU buffers for a batch's named arrays, filled on the copy stream.
#include "optim/train/prefetch.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/gpu_stream.h"

namespace ember::train {

Prefetcher::Prefetcher(Device device, Layout layout, const std::map<std::string, int64_t>& capacity)
    : device_(device), layout_(std::move(layout)), capacity_(capacity), slots_{Slot(device), Slot(device)} {
  EMBER_CHECK(device.is_cuda(), "Prefetcher: uploads go to a GPU, not {}", device.str());
  for (const auto& [name, n] : capacity_)
    EMBER_CHECK(n > 0, "Prefetcher: array '{}' needs a capacity > 0, not {}", name, n);
}

Prefetcher::~Prefetcher() {
  try {
    for (const Slot& s : slots_) s.uploaded.wait(GpuStream::Compute);
  } catch (...) {  // NOTE: a destructor must not throw; a broken device fails the next call anyway
  }
}

// `name`'s view in the slot: the first elements of its buffers, in the host array's shape (grown if they are
// too small); stage() then rewrites them in place.
void Prefetcher::point_views(Slot& s, const std::string& name, const Tensor& host) {
  const auto held = s.view.arrays.find(name);
  if (held != s.view.arrays.end() && held->second.shape() == host.shape() && held->second.dtype() == host.dtype())
    return;
  const auto kind = layout_.find(name);
  const bool ids = kind != layout_.end() && kind->second.id_bound > 0;
  const bool buckets = ids && kind->second.buckets;
  const int64_t n = host.numel();
  Buffers& b = s.buffers[name];
  if (!b.values.defined() || b.capacity < n || b.values.dtype() != (ids ? Dtype::Int64 : host.dtype())) {
    const auto wanted = capacity_.find(name);
    b.capacity = std::max(n, wanted == capacity_.end() ? int64_t(0) : wanted->second);
    b.values = Tensor::empty({b.capacity}, ids ? Dtype::Int64 : host.dtype(), device_);
    b.buckets = buckets ? Tensor::empty({3 * b.capacity + 2}, Dtype::Int64, device_) : Tensor();
    // NOTE: the allocator may hand out a block still read or written by work queued on the compute stream (its
    // order): the upload into it waits for that work.
    s.read.record(GpuStream::Compute);
  }
  s.view.same_per_shape.erase(name);  // a new view: staged whatever its kind
  Tensor values = b.values.narrow(0, 0, n).view(host.shape());
  s.view.arrays[name] = values;
  if (ids) s.view.ids[name] = {values, buckets ? b.buckets.narrow(0, 0, 3 * n + 2) : Tensor(), 0};
}

void Prefetcher::prefetch(const Batch& batch) {
  EMBER_CHECK(prefetched_ == taken_, "Prefetcher::prefetch: the batch prefetched before was not taken");
  Slot& s = slots_[size_t(prefetched_ % 2)];
  for (const auto& [name, host] : batch) point_views(s, name, host);
  s.read.wait(GpuStream::Copy);  // the step that read this slot's last batch is done (on the GPU)
  stage(batch, layout_, device_, GpuStream::Copy, s.view);
  s.uploaded.record(GpuStream::Copy);
  ++prefetched_;
}

const DeviceBatch& Prefetcher::take() {
  EMBER_CHECK(prefetched_ > taken_, "Prefetcher::take: no batch was prefetched");
  EMBER_CHECK(released_ == taken_, "Prefetcher::take: the batch taken before was not released");
  Slot& s = slots_[size_t(taken_ % 2)];
  s.uploaded.wait(GpuStream::Compute);
  ++taken_;
  return s.view;
}

void Prefetcher::release() {
  EMBER_CHECK(released_ < taken_, "Prefetcher::release: no batch was taken");
  slots_[size_t(released_ % 2)].read.record(GpuStream::Compute);
  ++released_;
}

}  // namespace ember::train
