// The caching CPU allocator: blocks are reused, statistics add up, huge requests are clear errors;
// and the block cache it shares with the CUDA allocator (core/block_cache.h).
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "core/allocator.h"
#include "core/block_cache.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("allocator: a freed block is reused for the next request that fits, and stats follow") {
  MemoryStats before = memory_stats();
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000, 1000});
    first = t.raw_data();
    CHECK(memory_stats().allocated >= before.allocated + 4000000);
  }
  CHECK(memory_stats().allocated == before.allocated);
  {
    Tensor again = Tensor::empty({1000, 990});  // a little smaller: fits the cached block
    CHECK(again.raw_data() == first);
  }
  reset_peak_memory();
  int64_t base = memory_stats().allocated;
  { Tensor a = Tensor::empty({2000, 1000}); }
  CHECK(memory_stats().peak_allocated >= base + 8000000);
  CHECK(reinterpret_cast<uintptr_t>(Tensor::empty({3}).raw_data()) % 64 == 0);
}

TEST_CASE("allocator: a step whose tensors pass 1 GiB finds them cached at the next step") {
  // Three 400 MiB tensors alive at once (never written: no page is touched), freed, then asked for
  // again, as the next training step would: the same blocks come back, none from the system.
  auto three_blocks = [] {
    std::vector<Tensor> tensors;
    for (int i = 0; i < 3; ++i) tensors.push_back(Tensor::empty({100, int64_t(1) << 20}));
    std::set<void*> blocks;
    for (const Tensor& t : tensors) blocks.insert(t.raw_data());
    return blocks;
  };
  const std::set<void*> first = three_blocks();
  const int64_t reserved = memory_stats().reserved;
  CHECK(reserved >= 3 * (int64_t(400) << 20));
  CHECK(three_blocks() == first);
  CHECK(memory_stats().reserved == reserved);
  allocator_for(Device::cpu()).release_cached();
}

TEST_CASE("allocator: impossible sizes are clear errors, not crashes") {
  check_error([] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 20}); }, "too large to allocate");
  check_error([] { Tensor::empty({-1, 3}); }, "negative size");
}

TEST_CASE("block cache: reuse within 1.5x of the request, statistics, unknown pointers, release") {
  BlockCache cache;
  char blocks[3][1];  // stand-in addresses: the cache never touches the memory
  cache.add_new(blocks[0], 1024);
  cache.add_new(blocks[1], 4096);
  CHECK(cache.stats().allocated == 5120);
  CHECK(cache.stats().reserved == 5120);
  CHECK(cache.stats().peak_allocated == 5120);
  size_t size = 1024;
  CHECK(cache.take(size) == nullptr);  // nothing cached yet
  CHECK(cache.give_back(blocks[0]));
  CHECK(cache.give_back(blocks[1]));
  CHECK_FALSE(cache.give_back(blocks[2]));  // never handed out: refused, nothing changes
  CHECK_FALSE(cache.give_back(blocks[0]));  // already free
  CHECK(cache.stats().allocated == 0);
  CHECK(cache.cached_bytes() == 5120);
  size = 2048;  // the 4096 block would waste half of itself: not taken
  CHECK(cache.take(size) == nullptr);
  size = 3000;  // fits the 4096 block within 1.5x
  CHECK(cache.take(size) == blocks[1]);
  CHECK(size == 4096);
  CHECK(cache.stats().allocated == 4096);
  cache.reset_peak();
  CHECK(cache.stats().peak_allocated == 4096);
  size = 1000;
  CHECK(cache.take(size) == blocks[0]);
  CHECK(cache.give_back(blocks[0]));
  std::vector<void*> freed;
  cache.release([&](void* p) { freed.push_back(p); });
  CHECK(freed == std::vector<void*>{blocks[0]});
  CHECK(cache.cached_bytes() == 0);
  CHECK(cache.stats().reserved == 4096);  // the live block is still reserved
}
