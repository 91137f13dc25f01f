// The bookkeeping both caching allocators share (core/cpu/cpu_allocator.cpp for the CPU,
// cuda/runtime.cu for each GPU): freed blocks kept by size class and handed out again, the size of
// every live block, and the statistics. It never talks to the system itself: an allocator asks it
// for a cached block first, gets new memory from the system (aligned_alloc, cudaMalloc) only when
// there is none, and frees the blocks that release() hands back. The allocator holds the lock.
// C++17 and no fmt: cuda/runtime.cu includes it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace ember {

class BlockCache {
 public:
  // Cached blocks of about `size` (a size class): the smallest that fits, if it wastes at most a
  // third of itself (so the varying lengths of dynamic padding reuse blocks instead of piling up
  // new ones). Returns null when there is none; otherwise the block is live again and `size` is
  // set to its real size.
  void* take(size_t& size) {
    auto it = free_.lower_bound(size);
    while (it != free_.end() && it->second.empty()) ++it;
    if (it == free_.end() || it->first > size + size / 2) return nullptr;
    size = it->first;
    void* ptr = it->second.back();
    it->second.pop_back();
    cached_ -= size;
    now_live(ptr, size);
    return ptr;
  }

  // A new block of `size` bytes from the system, now live.
  void add_new(void* ptr, size_t size) {
    stats_.reserved += int64_t(size);
    now_live(ptr, size);
  }

  // A live block is freed: it goes into the cache. False (and nothing changes) for a pointer this
  // cache did not hand out.
  // NOTE: the cache's own bookkeeping may need memory: if that push throws std::bad_alloc, nothing
  // has changed and the caller can hand the block to the system with forget() instead.
  bool give_back(void* ptr) {
    auto found = live_.find(ptr);
    if (found == live_.end()) return false;
    const size_t size = found->second;
    free_[size].push_back(ptr);
    live_.erase(found);
    stats_.allocated -= int64_t(size);
    cached_ += size;
    return true;
  }

  // A live block leaves the cache's books without being cached (the caller frees it). Allocates nothing.
  bool forget(void* ptr) {
    auto found = live_.find(ptr);
    if (found == live_.end()) return false;
    stats_.allocated -= int64_t(found->second);
    stats_.reserved -= int64_t(found->second);
    live_.erase(found);
    return true;
  }

  // Empties the cache: free_block(ptr) for every cached block (the caller gives it back to the system).
  template <typename FreeBlock>
  void release(FreeBlock free_block) {
    for (auto& [size, blocks] : free_) {
      for (void* block : blocks) free_block(block);
      stats_.reserved -= int64_t(size * blocks.size());
      blocks.clear();
    }
    cached_ = 0;
  }

  size_t cached_bytes() const { return cached_; }
  const MemoryStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_allocated = stats_.allocated; }

 private:
  void now_live(void* ptr, size_t size) {
    live_[ptr] = size;
    stats_.allocated += int64_t(size);
    if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
  }

  std::map<size_t, std::vector<void*>> free_;  // size class -> cached free blocks
  std::unordered_map<void*, size_t> live_;     // live block -> its size
  size_t cached_ = 0;                          // bytes in free_
  MemoryStats stats_;
};

}  // namespace ember
