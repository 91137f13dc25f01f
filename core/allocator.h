// Device memory allocators: the interface, its statistics, and the allocator for each device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ember {

// The size a caching allocator hands out for a request of `nbytes`: a multiple of `granule` up to
// `small`, then one of 8 classes per power of two (at most 12.5% waste), so that slightly
// different shapes (dynamic padding) reuse each other's blocks. Both allocators use it.
inline size_t size_class(size_t nbytes, size_t granule, size_t small) {
  if (nbytes <= small) return (nbytes + granule - 1) / granule * granule;
  size_t power = size_t(1) << (63 - __builtin_clzll(nbytes));
  size_t step = power / 8;
  return (nbytes + step - 1) / step * step;
}


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
