// Storage: a reference-counted block of device memory that one or more tensors view.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace ember {

class Storage {
 public:
  // Uninitialised memory for nbytes on `device`, from that device's allocator.
  Storage(int64_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // How many in-place writes this memory has had: every in-place op bumps it, and autograd compares it
  // with the version a saved tensor had when backward saved it (autograd/saved_tensor.h).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  Device device_;
};

}  // namespace ember
