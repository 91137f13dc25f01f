// Device memory on the CPU: cudaMalloc is host memory the emulator keeps a list of, so that every
// copy can be checked against where its pointers really live.
//
//   - Fresh allocations are filled with 0xFF bytes (NaN as float or double, -1 as an integer), so a
//     kernel that reads memory nobody wrote gives NaN instead of a lucky zero.
//   - Each device has 8 GiB (EMBER_EMULATED_MEMORY_GIB to change it, or EMBER_EMULATED_MEMORY_MIB
//     for less than a GiB: the fault tests' out-of-memory runs); cudaMalloc beyond that fails
//     with cudaErrorMemoryAllocation, and cudaMemGetInfo reports the same numbers.
//   - cudaMemcpy* checks its kind: a "device" pointer must lie inside one live allocation (the
//     whole range), a "host" pointer must not. A GPU would fault, or with unified addressing copy
//     silently from the wrong place; here the error names the pointer and the kind.
//   - Copies and memsets are queued on their stream (streams.cpp): see copy() below.
//   - With EMBER_EMULATOR_PROTECT=1, device memory is an mmap'ed arena per device that host code
//     cannot touch (PROT_NONE) except while the emulator itself works on it (DeviceAccess: a
//     kernel, a copy, a memset, a cuBLAS or cuDNN call). Host code that dereferences a device
//     pointer then faults, as it would on a real GPU. Off by default: switching the protection
//     costs two mprotect calls per launch, about 0.7 ms for 64 MB of device memory in use.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "counters.h"
#include "state.h"

namespace ember_emu {
namespace {

struct Allocation {
  size_t size;
  int device;
};

std::mutex mutex;
std::map<uintptr_t, Allocation> allocations;  // start address -> allocation
std::vector<size_t> used_bytes(16, 0);         // per device

size_t capacity() {
  static const size_t bytes = [] {
    if (const char* mib = std::getenv("EMBER_EMULATED_MEMORY_MIB")) return size_t(std::atoll(mib)) << 20;
    const char* env = std::getenv("EMBER_EMULATED_MEMORY_GIB");
    size_t gib = env != nullptr ? size_t(std::atoll(env)) : 8;
    return gib << 30;
  }();
  return bytes;
}

bool protect() {
  static const bool on = [] {
    const char* env = std::getenv("EMBER_EMULATOR_PROTECT");
    return env != nullptr && env[0] == '1';
  }();
  return on;
}

// EMBER_EMULATOR_PROTECT=1: a device's memory, carved first-fit from one reserved region.
struct Arena {
  char* base = nullptr;
  size_t high_water = 0;                  // the end of the highest block in use (from base)
  std::map<size_t, size_t> free_ranges;   // offset -> size, below high_water, coalesced
};
std::vector<Arena> arenas(16);
int access_depth = 0;  // open DeviceAccess guards (under access_mutex)
std::mutex access_mutex;

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
size_t page_round(size_t bytes) { return (bytes + page_size() - 1) / page_size() * page_size(); }

void set_protection(int prot) {
  for (Arena& arena : arenas)
    if (arena.base != nullptr && arena.high_water > 0) mprotect(arena.base, page_round(arena.high_water), prot);
}

// Caller holds the mutex. Null when the device's region is full.
void* arena_allocate(int device, size_t bytes) {
  Arena& arena = arenas[size_t(device)];
  if (arena.base == nullptr) {
    void* region = mmap(nullptr, capacity(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) return nullptr;
    arena.base = static_cast<char*>(region);
  }
  for (auto it = arena.free_ranges.begin(); it != arena.free_ranges.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t offset = it->first, left = it->second - bytes;
    arena.free_ranges.erase(it);
    if (left > 0) arena.free_ranges[offset + bytes] = left;
    return arena.base + offset;
  }
  if (bytes > capacity() - arena.high_water) return nullptr;
  void* p = arena.base + arena.high_water;
  arena.high_water += bytes;
  std::lock_guard<std::mutex> lock(access_mutex);
  if (access_depth > 0) mprotect(arena.base, page_round(arena.high_water), PROT_READ | PROT_WRITE);
  return p;
}

// Caller holds the mutex.
void arena_free(int device, void* p, size_t bytes) {
  Arena& arena = arenas[size_t(device)];
  size_t offset = size_t(static_cast<char*>(p) - arena.base);
  auto next = arena.free_ranges.lower_bound(offset);
  if (next != arena.free_ranges.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = arena.free_ranges.erase(next);
  }
  if (next != arena.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      arena.free_ranges.erase(prev);
    }
  }
  // The freed pages are given back to the system (a block's bytes are 0xFF-filled again when handed
  // out), and a range at the top lowers the high water: switching the protection walks the pages in
  // use below it, so without this every launch pays for all the memory earlier tests ever held.
  const size_t first_page = page_round(offset), end_page = (offset + bytes) / page_size() * page_size();
  if (end_page > first_page) madvise(arena.base + first_page, end_page - first_page, MADV_DONTNEED);
  if (offset + bytes == arena.high_water) {  // out of reach again, as the region above always is
    arena.high_water = offset;
    mprotect(arena.base + first_page, page_round(offset + bytes) - first_page, PROT_NONE);
  } else {
    arena.free_ranges[offset] = bytes;
  }
}

// The allocation holding [p, p + bytes), or null. Caller holds the mutex.
const Allocation* find_locked(const void* ptr, size_t bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  --it;
  if (p - it->first + bytes > it->second.size) return nullptr;
  return &it->second;
}

std::string hex(const void* p) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%p", p);
  return buffer;
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// Checks that [ptr, ptr + count) is where `kind` says (device or host); returns "" when it is.
std::string check_side(const char* role, const void* ptr, size_t count, bool device_side) {
  std::lock_guard<std::mutex> lock(mutex);
  const bool on_device = find_locked(ptr, count) != nullptr;
  if (device_side && !on_device) {
    const bool starts_on_device = find_locked(ptr, 1) != nullptr;
    return std::string(role) + " " + hex(ptr) +
           (starts_on_device ? " starts in device memory but " + std::to_string(count) + " bytes run past its allocation"
                             : " is not device memory (no live cudaMalloc allocation holds it)");
  }
  if (!device_side && find_locked(ptr, 1) != nullptr)
    return std::string(role) + " " + hex(ptr) + " is device memory, where the copy's kind says host memory";
  return "";
}

}  // namespace

DeviceAccess::DeviceAccess() {
  if (!protect()) return;
  std::lock_guard<std::mutex> lock(mutex);
  std::lock_guard<std::mutex> access(access_mutex);
  if (access_depth++ == 0) set_protection(PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  if (!protect()) return;
  std::lock_guard<std::mutex> lock(mutex);
  std::lock_guard<std::mutex> access(access_mutex);
  if (--access_depth == 0) set_protection(PROT_NONE);
}

bool protect_mode() { return protect(); }

bool in_device_memory(const void* ptr, size_t bytes, int* device) {
  std::lock_guard<std::mutex> lock(mutex);
  const Allocation* a = find_locked(ptr, bytes == 0 ? 1 : bytes);
  if (a != nullptr && device != nullptr) *device = a->device;
  return a != nullptr;
}

}  // namespace ember_emu

using namespace ember_emu;

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeFrom = size_t(4) << 20;  // blocks at least this large go on huge pages

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  if (refuse_in_capture("cudaMalloc") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  const int device = current_device();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (size > capacity() - used_bytes[size_t(device)])
      return set_error(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(size) + ") with " +
                                                      std::to_string(used_bytes[size_t(device)]) + " of " +
                                                      std::to_string(capacity()) + " emulated bytes in use");
  }
  const size_t rounded = (size + 255) / 256 * 256;  // cudaMalloc's alignment: 256 bytes
  void* p = nullptr;
  if (protect()) {
    std::lock_guard<std::mutex> lock(mutex);
    p = arena_allocate(device, rounded);
  } else if (rounded >= kHugeFrom) {
    // NOTE: large blocks on 2 MiB pages where the kernel allows it (transparent huge pages, madvise
    // mode): the 0xFF fill below then faults once per 2 MiB, not per 4 KiB (the recipe's step
    // allocates over a GiB; its page faults took seconds of the emulator's time).
    const size_t huge = (rounded + kHugePage - 1) / kHugePage * kHugePage;
    p = std::aligned_alloc(kHugePage, huge);
    if (p != nullptr) madvise(p, huge, MADV_HUGEPAGE);  // a hint: ignored where unsupported
  } else {
    p = std::aligned_alloc(256, rounded);
  }
  if (p == nullptr) return set_error(cudaErrorMemoryAllocation, "the host is out of memory");
  if (!dry_mode()) {  // (dry mode: nothing reads it; the fill would only be timed)
    DeviceAccess access;
    std::memset(p, 0xFF, rounded);
  }
  note_call(Call::kMalloc);
  std::lock_guard<std::mutex> lock(mutex);
  allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{size, device};
  used_bytes[size_t(device)] += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  if (ptr == nullptr) return cudaSuccess;
  if (refuse_in_capture("cudaFree") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  catch_up(nullptr, true);  // cudaFree synchronises the device: no queued work may still use the block
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations.end())
      return set_error(cudaErrorInvalidDevicePointer, "cudaFree(" + hex(ptr) + "): not the start of a live allocation");
    used_bytes[size_t(it->second.device)] -= it->second.size;
    if (protect()) arena_free(it->second.device, ptr, (it->second.size + 255) / 256 * 256);
    allocations.erase(it);
  }
  if (!protect()) std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (device_count() == 0) return set_error(cudaErrorNoDevice, "EMBER_EMULATED_DEVICES=0");
  std::lock_guard<std::mutex> lock(mutex);
  *total_bytes = capacity();
  *free_bytes = capacity() - used_bytes[size_t(current_device())];
  return cudaSuccess;
}

namespace {

// cudaMemcpyAsync, and cudaMemcpy (`sync`: the host waits for the copy, whatever the memory).
// Checked at the call; then:
//   - cudaMemcpy (the legacy stream, and the host waits): every blocking stream's pending work
//     first, then the copy, at the call;
//   - a copy between the device and pageable host memory: the driver stages it and the host waits
//     for the stream: its pending work, then the copy, at the call (refused in a capture);
//   - any other (device to device, or pinned host memory): queued on the stream, so its bytes
//     arrive only when the stream gets to it. With EMBER_EMULATOR_PROTECT=1 a pinned destination
//     cannot be read, nor a pinned source written, by the host until then (pinned.cpp).
cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  if (!stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: unknown stream");
  if (count == 0) return cudaSuccess;
  bool dst_device, src_device;
  switch (kind) {
    case cudaMemcpyHostToHost: dst_device = false, src_device = false; break;
    case cudaMemcpyHostToDevice: dst_device = true, src_device = false; break;
    case cudaMemcpyDeviceToHost: dst_device = false, src_device = true; break;
    case cudaMemcpyDeviceToDevice: dst_device = true, src_device = true; break;
    case cudaMemcpyDefault:
      dst_device = in_device_memory(dst, count), src_device = in_device_memory(src, count);
      break;
    default: return set_error(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: kind " + std::to_string(int(kind)));
  }
  std::string problem = check_side("destination", dst, count, dst_device);
  if (problem.empty()) problem = check_side("source", src, count, src_device);
  if (!problem.empty())
    return set_error(cudaErrorInvalidValue, std::string("cudaMemcpy of ") + std::to_string(count) + " bytes, " +
                                                kind_name(kind) + ": " + problem);
  const bool across = dst_device != src_device;
  const void* host = dst_device ? src : dst;
  const bool pinned = across ? is_pinned(host, count)
                     : dst_device || (is_pinned(dst, count) && is_pinned(src, count));
  const bool now = sync || !pinned;
  if (now && refuse_in_capture(sync ? "cudaMemcpy" : "cudaMemcpyAsync with pageable host memory") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  // Counted (counters.h), but not inside a capture: the graph's launch counts its copies; a
  // pageable host side makes the host wait.
  const bool captured = stream_capturing(stream);
  if (across && !captured) {
    note_copy(sync ? "cudaMemcpy" : pinned ? "cudaMemcpyAsync" : "cudaMemcpyAsync with pageable host memory",
              dst_device, pinned, count, now);
  } else if (sync) {
    note_copy("cudaMemcpy", true, true, 0, true);
  }
  if (dst_device && src_device && !captured) note_device_copy(count);
  const bool dry = dry_mode();  // only a copy to the host does something: it writes zeros
  if (now) {
    const cudaError_t pending = catch_up(sync ? nullptr : stream);
    DeviceAccess access;
    if (!dry) std::memmove(dst, src, count);
    else if (!dst_device) std::memset(dst, 0, count);
    return pending;
  }
  const bool held = !captured;  // a graph's copy holds nothing until it runs
  if (held && !dst_device) hold_pinned(dst, count, true);
  if (held && !src_device) hold_pinned(src, count, false);
  return enqueue(stream, [dst, src, count, dst_device, src_device, held, dry] {
    if (!dst_device) run_pinned_copy(dst, count, true, true, held);
    if (!src_device) run_pinned_copy(src, count, false, true, held);
    {
      DeviceAccess access;
      if (!dry) std::memmove(dst, src, count);
      else if (!dst_device) std::memset(dst, 0, count);
    }
    if (!dst_device) run_pinned_copy(dst, count, true, false, held);
    if (!src_device) run_pinned_copy(src, count, false, false, held);
    return cudaSuccess;
  });
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  return copy(dst, src, count, kind, stream, false);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  return copy(dst, src, count, kind, nullptr, true);
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  if (count == 0) return cudaSuccess;
  int d = -1, s = -1;
  if (!in_device_memory(dst, count, &d) || d != dst_device)
    return set_error(cudaErrorInvalidValue, "cudaMemcpyPeer: destination " + hex(dst) + " is not memory of device " +
                                                std::to_string(dst_device));
  if (!in_device_memory(src, count, &s) || s != src_device)
    return set_error(cudaErrorInvalidValue, "cudaMemcpyPeer: source " + hex(src) + " is not memory of device " +
                                                std::to_string(src_device));
  if (refuse_in_capture("cudaMemcpyPeer") != cudaSuccess) return cudaErrorStreamCaptureUnsupported;
  catch_up(nullptr, true);  // cudaMemcpyPeer is synchronous: after the work of both devices
  DeviceAccess access;
  if (!dry_mode()) std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (const cudaError_t broken = device_broken()) return broken;  // after a kernel fault (state.h)
  if (!stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: unknown stream");
  if (count == 0) return cudaSuccess;
  std::string problem = check_side("destination", ptr, count, true);
  if (!problem.empty()) return set_error(cudaErrorInvalidValue, "cudaMemset: " + problem);
  if (!stream_capturing(stream)) note_call(Call::kMemset);
  if (dry_mode()) return enqueue(stream, [] { return cudaSuccess; });
  return enqueue(stream, [ptr, value, count] {
    DeviceAccess access;
    std::memset(ptr, value, count);
    return cudaSuccess;
  });
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) { return cudaMemsetAsync(ptr, value, count, nullptr); }
