// Pinned (page-locked) host memory: cudaMallocHost / cudaHostAlloc / cudaFreeHost. Plain host
// memory here, listed, so that a copy can tell pinned from pageable memory: on a GPU only a copy
// from pinned memory runs asynchronously (a pageable one is staged by the driver and waits), and
// the emulator counts the pageable ones (counters.h).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "counters.h"
#include "state.h"

namespace ember_emu {
namespace {

std::mutex mutex;
std::map<uintptr_t, size_t> blocks;  // start -> bytes

}  // namespace

bool is_pinned(const void* ptr, size_t bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = blocks.upper_bound(p);
  if (it == blocks.begin()) return false;
  --it;
  return p - it->first + (bytes == 0 ? 1 : bytes) <= it->second;
}

}  // namespace ember_emu

using namespace ember_emu;

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned flags) {
  if (ptr == nullptr || flags > 0xF) return set_error(cudaErrorInvalidValue, "cudaHostAlloc: bad arguments");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (p == nullptr) return set_error(cudaErrorMemoryAllocation, "cudaHostAlloc(" + std::to_string(size) + ")");
  std::memset(p, 0xFF, size);
  std::lock_guard<std::mutex> lock(mutex);
  blocks[reinterpret_cast<uintptr_t>(p)] = size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (blocks.erase(reinterpret_cast<uintptr_t>(ptr)) == 0)
      return set_error(cudaErrorInvalidValue, "cudaFreeHost: not the start of a pinned block");
  }
  std::free(ptr);
  return cudaSuccess;
}
