// The error messages of the CUDA backend (host C++20, so fmt is fine here; the .cu files only
// call these functions, declared in cuda/check.h).
#include <cstddef>
#include <cstdint>

#include "core/error.h"

namespace ember::cuda {

[[noreturn]] void raise_error(const char* library, const char* call, const char* file, int line, const char* message) {
  fail("{} error: {} failed at {}:{}: {}", library, call, file, line, message);
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
