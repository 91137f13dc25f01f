// The CPU allocator: 64-byte aligned blocks, cached by size class (core/block_cache.h) so that a
// training step (which frees and re-asks for the same sizes every step) does not go back to the
// system. The cache is given back when the allocator holds more than 1 GiB beyond the most bytes
// tensors ever held at once: a step that needs 2 GiB keeps its blocks for the next step, and the
// blocks that dynamic padding's changing sizes leave behind are bounded.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>

#include "core/allocator.h"
#include "core/block_cache.h"
#include "core/device_copy.h"
#include "core/error.h"

namespace ember {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kSlack = size_t(1) << 30;  // cached bytes beyond the largest working set that are kept

// Size classes (core/allocator.h): multiples of 64 bytes up to 4 KiB, then 8 per power of two.
size_t size_class(size_t nbytes) { return ember::size_class(nbytes, kAlignment, 4096); }

std::string human_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.1f} {}", bytes, units[unit]);
}

class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override { release_cached(); }

  void* allocate(size_t nbytes) override {
    size_t size = size_class(std::max<size_t>(nbytes, 1));
    std::lock_guard<std::mutex> lock(mutex_);
    if (void* cached = cache_.take(size)) return note_live(cached);
    void* ptr = std::aligned_alloc(kAlignment, size);
    if (ptr == nullptr) {  // give the cache back to the system and try once more
      cache_.release(std::free);
      ptr = std::aligned_alloc(kAlignment, size);
    }
    EMBER_CHECK(ptr != nullptr, "out of CPU memory: cannot allocate {} ({} bytes); {} in use by tensors",
                human_bytes(double(nbytes)), nbytes, human_bytes(double(cache_.stats().allocated)));
    try {
      cache_.add_new(ptr, size);
    } catch (const std::bad_alloc&) {  // no memory left even for the bookkeeping
      std::free(ptr);
      fail("out of CPU memory: cannot record a block of {} ({} bytes); {} in use by tensors", human_bytes(double(nbytes)),
           nbytes, human_bytes(double(cache_.stats().allocated)));
    }
    return note_live(ptr);
  }

  // NOTE: runs in destructors (a tensor's storage going away), so it must not throw for want of
  // memory: when the cache cannot record the free block (std::bad_alloc under a memory limit),
  // the block goes straight back to the system, and so does the cache.
  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    bool known = false;
    try {
      known = cache_.give_back(ptr);
    } catch (const std::bad_alloc&) {
      known = cache_.forget(ptr);
      if (known) std::free(ptr);
      cache_.release(std::free);
      return;
    }
    EMBER_CHECK(known, "CPU allocator: freeing {} that it did not allocate", ptr);
    // NOTE: the limit follows the largest working set. A fixed 1 GiB of cache gave the blocks of a step
    // whose tensors pass it back to the system every step, and the next step page-faulted all of them
    // in again: full attention at T = 2048, batch 8 (1.3 GiB of tensors) took 5.7 s a step, 1.25 s now.
    if (size_t(cache_.stats().reserved) > most_live_ + kSlack) cache_.release(std::free);
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_.stats();
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.reset_peak();
  }
  void release_cached() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.release(std::free);
  }

 private:
  void* note_live(void* ptr) {
    most_live_ = std::max(most_live_, size_t(cache_.stats().allocated));
    return ptr;
  }

  mutable std::mutex mutex_;
  BlockCache cache_;
  size_t most_live_ = 0;  // the most bytes tensors ever held at once (never reset, unlike the peak)
};

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cuda()) return cuda_allocator(device.index);
  static CpuAllocator* cpu = new CpuAllocator();  // NOTE: leaked on purpose: tensors may outlive statics.
  return *cpu;
}

MemoryStats memory_stats(Device device) { return allocator_for(device).stats(); }
void reset_peak_memory(Device device) { allocator_for(device).reset_peak(); }

#ifndef EMBER_WITH_CUDA
Allocator& cuda_allocator(int) { fail("this build of Ember has no CUDA backend (configure with nvcc present)"); }
int cuda_device_count() { return 0; }
void copy_bytes_across_devices(void*, Device, const void*, Device, int64_t) {
  fail("this build of Ember has no CUDA backend (configure with nvcc present)");
}
#endif

}  // namespace ember
