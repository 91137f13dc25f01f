// Pinned (page-locked) host memory: cudaMallocHost / cudaHostAlloc / cudaFreeHost. Plain host
// memory here, listed, so that a copy can tell pinned from pageable memory: on a GPU only a copy
// from pinned memory runs asynchronously (a pageable one is staged by the driver and waits), and
// the emulator counts the pageable ones (counters.h).
// A queued copy to or from pinned memory (streams.cpp) runs when its stream gets to it. With
// EMBER_EMULATOR_PROTECT=1 the host cannot touch what such a copy has yet to do: the pages it will
// write are PROT_NONE (a read before the synchronisation that completes the copy faults), the
// pages it will read are PROT_READ (a write that would change what is uploaded faults). Blocks are
// whole pages, so nothing else shares them.
#include <sys/mman.h>
#include <unistd.h>

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

// Pages of pinned blocks held by queued copies (under mutex): how many will write (device to
// host) and read (host to device) each.
struct Holds {
  int writes = 0, reads = 0;
};
std::map<uintptr_t, Holds> holds;

uintptr_t page_size() {
  static const uintptr_t bytes = uintptr_t(sysconf(_SC_PAGESIZE));
  return bytes;
}

template <typename Fn>
void each_page(const void* ptr, size_t bytes, Fn fn) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(ptr) / page_size() * page_size();
  const uintptr_t end = reinterpret_cast<uintptr_t>(ptr) + bytes;
  for (uintptr_t page = first; page < end; page += page_size()) fn(page);
}

void apply(uintptr_t page) {
  auto it = holds.find(page);
  int prot = PROT_READ | PROT_WRITE;
  if (it != holds.end()) {
    if (it->second.writes > 0) prot = PROT_NONE;
    else if (it->second.reads > 0) prot = PROT_READ;
    if (it->second.writes == 0 && it->second.reads == 0) holds.erase(it);
  }
  mprotect(reinterpret_cast<void*>(page), page_size(), prot);
}

bool pinned_locked(const void* ptr, size_t bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks.upper_bound(p);
  if (it == blocks.begin()) return false;
  --it;
  return p - it->first + (bytes == 0 ? 1 : bytes) <= it->second;
}

}  // namespace

void hold_pinned(const void* ptr, size_t bytes, bool device_writes) {
  if (!protect_mode() || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (!pinned_locked(ptr, bytes)) return;
  each_page(ptr, bytes, [&](uintptr_t page) {
    Holds& h = holds[page];
    (device_writes ? h.writes : h.reads) += 1;
    apply(page);
  });
}

void run_pinned_copy(const void* ptr, size_t bytes, bool device_writes, bool open, bool held) {
  if (!protect_mode() || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (!pinned_locked(ptr, bytes)) return;
  each_page(ptr, bytes, [&](uintptr_t page) {
    if (open) {
      mprotect(reinterpret_cast<void*>(page), page_size(), PROT_READ | PROT_WRITE);
      return;
    }
    auto it = holds.find(page);
    if (held && it != holds.end()) (device_writes ? it->second.writes : it->second.reads) -= 1;
    apply(page);
  });
}

bool is_pinned(const void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  return pinned_locked(ptr, bytes);
}

}  // namespace ember_emu

using namespace ember_emu;

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned flags) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  if (ptr == nullptr || flags > 0xF) return set_error(cudaErrorInvalidValue, "cudaHostAlloc: bad arguments");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  *ptr = nullptr;
  if (refuse_in_capture("cudaHostAlloc") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
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
  if (refuse_in_capture("cudaFreeHost") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  catch_up(nullptr, true);  // it synchronises the device: no queued copy may still use the block
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (blocks.erase(reinterpret_cast<uintptr_t>(ptr)) == 0)
      return set_error(cudaErrorInvalidValue, "cudaFreeHost: not the start of a pinned block");
  }
  std::free(ptr);
  return cudaSuccess;
}
