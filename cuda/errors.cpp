// The error messages of the CUDA backend (host C++20, so fmt is fine here; the .cu files only
// call these functions, declared in cuda/check.h).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/check.h"

namespace ember::cuda {

[[noreturn]] void raise_error(const char* library, const char* call, const char* file, int line, const char* message) {
  fail("{} error: {} failed at {}:{}: {}", library, call, file, line, message);
}

namespace {

// The last kernels launched (note_launch), as a ring: string literals (kernel names), never freed.
constexpr size_t kRecent = 6;
std::array<std::atomic<const char*>, kRecent> recent_launches{};
std::atomic<uint64_t> launches{0};

// The kernels launched last, newest first.
std::string recent_kernels() {
  const uint64_t n = launches.load(std::memory_order_relaxed);
  std::string out;
  for (uint64_t i = 0; i < kRecent && i < n; ++i) {
    const char* name = recent_launches[(n - 1 - i) % kRecent].load(std::memory_order_relaxed);
    if (name == nullptr) continue;
    out += out.empty() ? name : std::string(", ") + name;
  }
  return out.empty() ? "none yet" : out;
}

}  // namespace

void note_launch(const char* what) {
  const uint64_t i = launches.fetch_add(1, std::memory_order_relaxed);
  recent_launches[i % kRecent].store(what, std::memory_order_relaxed);
}

[[noreturn]] void raise_cuda_error(int code, const char* text, const char* call, const char* file, int line) {
  if (code < 700 || code > 719) raise_error("CUDA", call, file, line, text);
  const uint64_t n = launches.load(std::memory_order_relaxed);
  const bool after_replay =
      n > 0 && recent_launches[(n - 1) % kRecent].load(std::memory_order_relaxed) == kGraphReplayLaunch;
  // EMBER_CUDA_SYNC=1 waits after each launch, but not inside a graph's capture (cuda/runtime.cu's
  // check_launch): a graph's kernels are checked at its replay, and are named only when run eagerly.
  const char* rerun = after_replay ? "; the last launch was a CUDA graph's replay, and EMBER_CUDA_SYNC=1 does not wait "
                                     "for a launch inside a capture (a captured kernel is checked at the replay): rerun "
                                     "without CUDA graphs (the trainer's --cuda-graph off) and with EMBER_CUDA_SYNC=1 to "
                                     "have the kernel named"
                                   : "";
  fail("a GPU kernel failed: {} (reported by {} at {}:{}, a call after the kernel ran: a GPU reports a kernel's "
       "fault late). The kernels launched last, newest first: {}. This process cannot use the GPU further; rerun "
       "with EMBER_CUDA_SYNC=1 to have the fault reported at the launch of the kernel that failed{}",
       text, call, file, line, recent_kernels(), rerun);
}

[[noreturn]] void raise_message(const char* message) { fail("{}", message); }

[[noreturn]] void raise_out_of_memory(int device, size_t requested, int64_t allocated, int64_t reserved,
                                      size_t free_bytes, size_t total_bytes) {
  fail("out of GPU memory on cuda:{}: asked for {} bytes ({:.1f} MiB) with {} bytes ({:.1f} MiB) in use by tensors "
       "and {} bytes reserved by Ember's cache (the cache was released and the allocation retried); the device "
       "reports {} of {} bytes free",
       device, requested, double(requested) / 1048576.0, allocated, double(allocated) / 1048576.0, reserved,
       free_bytes, total_bytes);
}

}  // namespace ember::cuda
