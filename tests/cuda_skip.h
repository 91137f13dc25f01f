// GPU tests skip cleanly without a CUDA device: they print why, and under ctest they exit with
// code 77, which CMake's test properties turn into "Skipped" in ctest's summary.
#pragma once
#include <cstdio>
#include <cstdlib>

#include "core/device.h"

namespace ember::testing {

// Defined (true) only by the CPU emulator of the CUDA backend (tests/cuda_emulator/launch.cpp), in
// ember_tests_emulated; a weak reference is null where nothing defines it (ember_tests).
extern "C" __attribute__((weak)) const bool ember_cuda_emulator;

// True when the CUDA backend runs on the CPU emulator, orders of magnitude slower than a GPU: a
// test may then shrink its sizes (saying so where it does).
inline bool cuda_emulated() { return &ember_cuda_emulator != nullptr; }

// Returns true (after printing the reason) when there is no GPU; the caller returns at once.
inline bool skip_without_cuda() {
  if (cuda_device_count() > 0) return false;
  std::printf("skipped: no CUDA device\n");
  std::fflush(stdout);
  if (std::getenv("EMBER_CTEST_SKIP") != nullptr) std::_Exit(77);
  return true;
}

}  // namespace ember::testing
