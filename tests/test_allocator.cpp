// The caching CPU allocator: blocks are reused, statistics add up, huge requests are clear errors.
#include "core/allocator.h"
#include "helpers.h"

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

TEST_CASE("allocator: impossible sizes are clear errors, not crashes") {
  check_error([] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 20}); }, "too large to allocate");
  check_error([] { Tensor::empty({-1, 3}); }, "negative size");
}
