// The protected run (ctest's emulated_protected: every emulated case in one process, with
// EMBER_EMULATOR_PROTECT=1): after each case, the caching allocators give their blocks back, so that
// each case starts with only the device memory it allocates. Switching the protection costs time in
// proportion to the device memory in use (tests/cuda_emulator/memory.cpp), and a block cached by an
// earlier case (the recipe's model, say) would make every later launch pay for it. Measured on the run's
// case list of the time: 65 s before the emulator gave freed pages back, 44 s after, 10 s with this too.
// Each case under plain ctest is its own process, where this changes nothing.
// Built into ember_tests_emulated only.
#include <doctest/doctest.h>

#include <cstdlib>

#include "core/allocator.h"
#include "core/device.h"
#include "tests/doctest_listener.h"

namespace {

struct ReleaseCachedBlocks : ember_test::Listener {
  using Listener::Listener;
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    static const bool protect = [] {
      const char* env = std::getenv("EMBER_EMULATOR_PROTECT");
      return env != nullptr && env[0] == '1';
    }();
    if (!protect) return;
    for (int i = 0; i < ember::cuda_device_count(); ++i) ember::cuda_allocator(i).release_cached();
  }
};
REGISTER_LISTENER("release_cached_blocks", 2, ReleaseCachedBlocks);

}  // namespace
