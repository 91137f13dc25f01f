// Device memory allocators: the interface, its statistics, and the allocator for each device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ember {

struct MemoryStats {
  int64_t allocated = 0;       // bytes in live tensors
  int64_t peak_allocated = 0;  // highest `allocated` since the last reset
  int64_t reserved = 0;        // bytes held from the system (allocated + cached free blocks)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void release_cached() = 0;  // give cached free blocks back to the system
};

// The allocator for a device; an ember::Error if that device is unavailable.
Allocator& allocator_for(Device device);
MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory(Device device = Device::cpu());

// Implemented in cuda/ when Ember is built with CUDA.
Allocator& cuda_allocator(int index);

}  // namespace ember
