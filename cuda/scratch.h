// A device buffer from the caching allocator for the length of one host call: freed when the call
// returns, after its launches are queued, which is safe on the one stream they run on (stream-ordered
// reuse, as a temporary tensor's block).
#pragma once
#include <cstddef>

#include "core/allocator.h"

namespace ember::cuda {

struct Scratch {
  int device;
  size_t bytes;
  void* ptr;
  Scratch(int d, size_t n) : device(d), bytes(n), ptr(ember::cuda_allocator(d).allocate(n)) {}
  ~Scratch() { ember::cuda_allocator(device).deallocate(ptr, bytes); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace ember::cuda
