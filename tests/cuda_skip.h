// Tests that cannot run here say so: they print why and, under ctest, exit with code 77, which the
// test properties turn into "Skipped" in ctest's summary (never a silent "Passed"). GPU tests skip
// this way without a CUDA device.
#pragma once
#include <cstdio>
#include <cstdlib>

#include "core/cuda_ops.h"
#include "core/device.h"

namespace ember::testing {

// Defined (true) only by the CPU emulator of the CUDA backend (tests/cuda_emulator/launch.cpp), in
// ember_tests_emulated; a weak reference is null where nothing defines it (ember_tests).
extern "C" __attribute__((weak)) const bool ember_cuda_emulator;

// True when the CUDA backend runs on the CPU emulator, orders of magnitude slower than a GPU: a
// test may then shrink its sizes (saying so where it does).
inline bool cuda_emulated() { return &ember_cuda_emulator != nullptr; }

// Prints "skipped: <reason>"; under ctest (EMBER_CTEST_SKIP, set by CMakeLists.txt on every test
// case, which ctest runs one per process) the process ends with 77: ctest reports "Skipped". Run
// by hand, the caller returns at once and doctest counts the case as passed, after this line.
// Use it as `if (...) return skip_test("why");` at the top of a TEST_CASE.
inline void skip_test(const char* reason) {
  std::printf("skipped: %s\n", reason);
  std::fflush(stdout);
  if (std::getenv("EMBER_CTEST_SKIP") != nullptr) std::_Exit(77);
}

// Returns true (after skip_test) when there is no GPU; the caller returns at once.
inline bool skip_without_cuda() {
  if (cuda_device_count() > 0) return false;
  skip_test("no CUDA device");
  return true;
}

// Chooses the GPU's attention kernels for one scope (fused, the default, or composed) and puts back the
// choice it found when the scope ends, however it ends.
class AttentionKernels {
 public:
  explicit AttentionKernels(bool fused) : before_(cuda::attention_fused()) { cuda::set_attention_fused(fused); }
  ~AttentionKernels() { cuda::set_attention_fused(before_); }
  AttentionKernels(const AttentionKernels&) = delete;
  AttentionKernels& operator=(const AttentionKernels&) = delete;

 private:
  bool before_;
};

}  // namespace ember::testing
