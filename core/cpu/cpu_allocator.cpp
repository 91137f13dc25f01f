// The CPU allocator: 64-byte aligned blocks, cached by size class so that a training step
// (which frees and re-asks for the same sizes every step) does not go back to the system.
// A request takes the smallest cached block that fits within 1.5x, so the varying sequence
// lengths of dynamic padding reuse blocks instead of piling up new ones.
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <new>
#include <vector>

#include "core/allocator.h"
#include "core/device_copy.h"
#include "core/error.h"

namespace ember {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMaxCachedBytes = size_t(1) << 30;  // past this, cached blocks are released

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
    void* ptr = nullptr;
    // The smallest cached block that fits, if it wastes at most a third of itself.
    auto it = free_.lower_bound(size);
    while (it != free_.end() && it->second.empty()) ++it;
    if (it != free_.end() && it->first <= size + size / 2) {
      size = it->first;
      ptr = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    } else {
      ptr = std::aligned_alloc(kAlignment, size);
      if (ptr == nullptr) {
        release_cached_locked();
        ptr = std::aligned_alloc(kAlignment, size);
      }
      EMBER_CHECK(ptr != nullptr, "out of CPU memory: cannot allocate {} ({} bytes); {} in use by tensors",
                  human_bytes(double(nbytes)), nbytes, human_bytes(double(stats_.allocated)));
      stats_.reserved += size;
    }
    stats_.allocated += size;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    block_sizes_[ptr] = size;
    return ptr;
  }

  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = block_sizes_.find(ptr);
    size_t size = found->second;
    block_sizes_.erase(found);
    stats_.allocated -= size;
    free_[size].push_back(ptr);
    cached_ += size;
    if (cached_ > kMaxCachedBytes) release_cached_locked();
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated = stats_.allocated;
  }
  void release_cached() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

 private:
  void release_cached_locked() {
    for (auto& [size, blocks] : free_) {
      for (void* block : blocks) std::free(block);
      stats_.reserved -= int64_t(size * blocks.size());
      blocks.clear();
    }
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;      // size class -> cached free blocks
  std::unordered_map<void*, size_t> block_sizes_;  // live block -> its size class
  size_t cached_ = 0;
  MemoryStats stats_;
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
