// Storage: a reference-counted block of device memory that one or more tensors view.
#pragma once
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

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  Device device_;
};

}  // namespace ember
