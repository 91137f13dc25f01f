// CUDA device plumbing: the device count, a current stream per device, the caching allocator and
// copies between host and device.
//
// The allocator keeps freed blocks by size class and hands them out again (core/block_cache.h,
// shared with the CPU's allocator), so that a training step (which frees and asks for the same
// sizes every step) makes no cudaMalloc / cudaFree calls once the first step has run. All work of
// a device is ordered on its one stream, so a block freed by one op and handed to the next cannot
// still be in use. When cudaMalloc fails, the cache is given back to the driver and the allocation
// retried once; then the error names the bytes asked for and the bytes in use.
// NOTE: compiled by CI with nvcc and run on the CPU emulator, not yet on a GPU (see docs/cuda.md).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/block_cache.h"
#include "core/device_copy.h"
#include "cuda/launch.h"

namespace ember {
namespace cuda {
namespace {

constexpr int kMaxDevices = 16;

void check_index(int index) {
  int count = cuda_device_count();
  if (index < 0 || index >= count) {
    char message[200];
    std::snprintf(message, sizeof message,
                  "cuda:%d is not available: %d CUDA device%s found%s", index, count, count == 1 ? "" : "s",
                  count == 0 ? " (no NVIDIA GPU or driver on this machine)" : "");
    raise_message(message);
  }
}

// Size classes (core/allocator.h): multiples of 512 bytes up to 1 MiB, then 8 per power of two.
size_t size_class(size_t nbytes) { return ember::size_class(nbytes, 512, size_t(1) << 20); }

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int index) : index_(index) {}

  void* allocate(size_t nbytes) override {
    check_index(index_);
    size_t size = size_class(nbytes == 0 ? 1 : nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    if (capturing_ != 0) return allocate_in_capture(size, nbytes);
    if (recording_) recorded_.push_back(size);
    if (void* cached = cache_.take(size)) return cached;
    void* ptr = nullptr;
    EMBER_CUDA_CHECK(cudaSetDevice(index_));
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the error, give the cache back, try once more
      release_cached_locked();
      status = cudaMalloc(&ptr, size);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      raise_out_of_memory(index_, nbytes, cache_.stats().allocated, cache_.stats().reserved, free_bytes, total_bytes);
    }
    EMBER_CUDA_CHECK(status);
    ++mallocs_;
    cache_.add_new(ptr, size);
    return ptr;
  }

  // The block is reused by later work on the same stream: stream order keeps that safe. A block a
  // graph uses goes back to the graph's pool instead (see begin_capture).
  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, pool] : pools_) {
      auto found = pool.owned.find(ptr);
      if (found != pool.owned.end()) {
        pool.free[found->second].push_back(ptr);
        return;
      }
    }
    cache_.give_back(ptr);
  }

  // CUDA graphs. While the device's stream captures, no cudaMalloc may happen (it would end the
  // capture), and every block the captured work uses must stay the graph's while the graph exists:
  // each replay writes into the same addresses, so a block handed to other work in between would
  // be overwritten. So a capture has a pool: its allocations come from blocks freed earlier in the
  // same capture (the graph runs in capture order, so that reuse is safe), else from the cache
  // (never cudaMalloc: warm up by running the work once before capturing it); a block of the pool
  // freed, during the capture or later, goes back to the pool, not to the cache; release_pool
  // (the graph destroyed) gives the pool's free blocks back to the cache.
  // NOTE: the pool's blocks, free or not, count as allocated in the statistics.
  // A capture's warm-up (cuda_ops.h, allocator_record): the sizes it allocates, then the cache
  // filled with a block of each at once (held together, then all given back).
  void record(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = on;
    if (on) recorded_.clear();
  }
  void fill_recorded() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<void*> held;
    for (size_t size : recorded_) {
      size_t got = size;
      void* ptr = cache_.take(got);
      if (ptr == nullptr) {
        EMBER_CUDA_CHECK(cudaSetDevice(index_));
        // NOTE: no retry after freeing the cache: it is being filled. Out of memory is said as such
        // (it was a raw "CUDA error: cudaMalloc ... out of memory", and its last error, left set,
        // was reported again by the next launch when the caller went on without a graph).
        const cudaError_t status = cudaMalloc(&ptr, size);
        if (status == cudaErrorMemoryAllocation) {
          cudaGetLastError();
          for (void* p : held) cache_.give_back(p);
          size_t free_bytes = 0, total_bytes = 0;
          cudaMemGetInfo(&free_bytes, &total_bytes);
          raise_out_of_memory(index_, size, cache_.stats().allocated, cache_.stats().reserved, free_bytes, total_bytes);
        }
        EMBER_CUDA_CHECK(status);
        ++mallocs_;
        cache_.add_new(ptr, size);
      }
      held.push_back(ptr);
    }
    for (void* ptr : held) cache_.give_back(ptr);
  }

  int begin_capture() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capturing_ != 0) raise_message("cuda graph: a capture is already running on this device");
    capturing_ = next_pool_++;
    pools_.emplace(capturing_, Pool{});
    return capturing_;
  }
  void end_capture() {
    std::lock_guard<std::mutex> lock(mutex_);
    capturing_ = 0;
  }
  void release_pool(int id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = pools_.find(id);
    if (found == pools_.end()) return;
    for (auto& [size, blocks] : found->second.free)
      for (void* block : blocks) cache_.give_back(block);
    pools_.erase(found);  // blocks still in use go to the cache when freed
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_.stats();
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.reset_peak();
  }
  void release_cached() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }
  int64_t malloc_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return mallocs_;
  }

 private:
  void release_cached_locked() {
    cudaSetDevice(index_);
    cudaDeviceSynchronize();  // nothing queued may still use a block given back
    cache_.release([](void* block) { cudaFree(block); });
  }

  void* allocate_in_capture(size_t size, size_t nbytes) {
    Pool& pool = pools_[capturing_];
    auto it = pool.free.lower_bound(size);
    while (it != pool.free.end() && it->second.empty()) ++it;
    if (it != pool.free.end() && it->first <= size + size / 2) {
      void* ptr = it->second.back();
      it->second.pop_back();
      return ptr;
    }
    size_t got = size;
    void* ptr = cache_.take(got);
    if (ptr == nullptr) {
      char message[300];
      std::snprintf(message, sizeof message,
                    "cuda graph capture on cuda:%d: no cached block for %zu bytes, and cudaMalloc is not allowed "
                    "while a stream captures: run the captured work once before capturing it (a warm-up), so that "
                    "the allocator holds the blocks it needs",
                    index_, nbytes);
      raise_message(message);
    }
    pool.owned[ptr] = got;
    return ptr;
  }

  struct Pool {
    std::unordered_map<void*, size_t> owned;       // every block the capture took, and its size
    std::map<size_t, std::vector<void*>> free;     // those freed since, by size
  };

  int index_;
  mutable std::mutex mutex_;
  BlockCache cache_;
  int64_t mallocs_ = 0;  // cudaMalloc calls so far
  std::map<int, Pool> pools_;
  int capturing_ = 0;    // the pool of the running capture, 0 when none
  bool recording_ = false;        // a warm-up notes the sizes it allocates
  std::vector<size_t> recorded_;
  int next_pool_ = 1;
};

CachingAllocator& caching_allocator(int index) {
  check_index(index);
  static CachingAllocator* allocators[kMaxDevices] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (index >= kMaxDevices) raise_message("cuda: device index out of range (at most 16 devices)");
  // NOTE: leaked on purpose: tensors may outlive static destructors.
  if (allocators[index] == nullptr) allocators[index] = new CachingAllocator(index);
  return *allocators[index];
}

// Host-to-device copies go through pinned staging blocks: the source is copied into one (a host
// memcpy, so the caller may reuse its memory at once), the block is copied to the device
// asynchronously on the stream, and an event recorded after that copy tells when the block may be
// used again. The host does not wait: a block whose copy has not finished is left alone and
// another one taken (or made, up to kStagingLimit bytes in all; past that the oldest is waited for).
// NOTE: a copy from pageable memory would make the host wait for the stream (the driver stages it).
constexpr size_t kStagingMin = size_t(64) << 10;     // the smallest block
constexpr size_t kStagingMax = size_t(16) << 20;     // larger copies go directly, and wait
constexpr size_t kStagingLimit = size_t(256) << 20;  // pinned bytes per device at most

// NOTE: a copy from the host inside a graph capture would be replayed from the same staging block,
// whatever it holds by then: refused (upload the data before the capture, into a tensor the graph
// reads, and refresh that tensor before each replay).
void refuse_in_capture(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) {
    char message[300];
    std::snprintf(message, sizeof message,
                  "cuda graph capture: %s inside the capture would be replayed from a staging buffer that holds "
                  "other data by then; copy before capturing, into a tensor the graph reads",
                  what);
    raise_message(message);
  }
}

class StagingPool {
 public:
  // False when the copy is too large for staging (the caller copies directly).
  bool upload(int device, void* dst, const void* src, size_t n, cudaStream_t stream) {
    refuse_in_capture(stream, "a host-to-device copy");
    if (n > kStagingMax) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = take(device, n);
    std::memcpy(block->ptr, src, n);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, block->ptr, n, cudaMemcpyHostToDevice, stream));
    EMBER_CUDA_CHECK(cudaEventRecord(block->done, stream));
    block->serial = ++serial_;
    return true;
  }

  // To the host: into a pinned block, one wait for the stream, then a host memcpy (a read of the
  // GPU waits anyway; through pinned memory the copy is one DMA and the wait is the only one).
  bool download(int device, void* dst, const void* src, size_t n, cudaStream_t stream) {
    if (n > kStagingMax) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = take(device, n);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(block->ptr, src, n, cudaMemcpyDeviceToHost, stream));
    EMBER_CUDA_CHECK(cudaEventRecord(block->done, stream));
    EMBER_CUDA_CHECK(cudaEventSynchronize(block->done));
    std::memcpy(dst, block->ptr, n);
    block->serial = ++serial_;
    return true;
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
    cudaEvent_t done;  // recorded after the block's last copy
    uint64_t serial;   // when it was last used (the oldest is waited for at the limit)
  };

  Block* take(int device, size_t n) {
    Block* oldest = nullptr;
    for (Block& b : blocks_) {
      if (b.size < n) continue;
      const cudaError_t state = cudaEventQuery(b.done);
      if (state == cudaSuccess) return &b;
      if (state != cudaErrorNotReady) EMBER_CUDA_CHECK(state);
      cudaGetLastError();  // NOTE: "not ready" is no error; clear it, as PyTorch does, or the next check reports it
      if (oldest == nullptr || b.serial < oldest->serial) oldest = &b;
    }
    size_t size = kStagingMin;
    while (size < n) size *= 2;
    if (bytes_ + size > kStagingLimit && oldest != nullptr) {
      EMBER_CUDA_CHECK(cudaEventSynchronize(oldest->done));  // far ahead of the GPU: wait for the oldest
      return oldest;
    }
    Block b{nullptr, size, nullptr, 0};
    EMBER_CUDA_CHECK(cudaSetDevice(device));
    EMBER_CUDA_CHECK(cudaHostAlloc(&b.ptr, size, cudaHostAllocDefault));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
    bytes_ += size;
    blocks_.push_back(b);
    return &blocks_.back();
  }

  std::mutex mutex_;
  std::deque<Block> blocks_;  // a deque: pointers to blocks stay valid as it grows
  size_t bytes_ = 0;
  uint64_t serial_ = 0;
};

StagingPool& staging_pool(int index) {
  static StagingPool* pools[kMaxDevices] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (pools[index] == nullptr) pools[index] = new StagingPool();  // NOTE: leaked on purpose, like the allocators
  return *pools[index];
}

}  // namespace

namespace {

// GPU `device`'s stream of one kind (kKind: 0 compute, 1 copy), created on first use with `flags`.
template <int kKind>
cudaStream_t stream_of_kind(int device, unsigned int flags) {
  static cudaStream_t streams[kMaxDevices] = {};
  static std::mutex mutex;
  if (device < 0 || device >= kMaxDevices) raise_message("cuda: device index out of range (at most 16 devices)");
  std::lock_guard<std::mutex> lock(mutex);
  if (streams[device] == nullptr) {
    EMBER_CUDA_CHECK(cudaSetDevice(device));
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], flags));
  }
  return streams[device];
}

}  // namespace

// The compute stream, where every op runs: a blocking stream, so it also waits for (and is waited on
// by) the legacy default stream.
cudaStream_t current_stream(int device) { return stream_of_kind<0>(device, cudaStreamDefault); }

cudaStream_t use_device(int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  return current_stream(device);
}

namespace {

std::atomic<int> sync_launches{-1};  // -1: not decided yet (read EMBER_CUDA_SYNC on first use)

}  // namespace

void set_launch_sync(bool on) { sync_launches = on ? 1 : 0; }

bool launch_sync() {
  int value = sync_launches.load();
  if (value < 0) {
    const char* env = std::getenv("EMBER_CUDA_SYNC");
    value = env != nullptr && env[0] == '1' ? 1 : 0;
    sync_launches = value;
  }
  return value == 1;
}

void check_launch(const char* what, const char* file, int line) {
  note_launch(what);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) raise_error("CUDA", what, file, line, cudaGetErrorString(status));
  if (!launch_sync()) return;
  // Inside a CUDA graph's capture the launch is only recorded: there is no kernel to wait for, and a
  // wait is refused (it would end the capture with "operation not permitted when stream is
  // capturing", hiding the error being looked for). A captured kernel is checked when the graph
  // replays (raise_cuda_error says so).
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(current_stream(device), &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  status = cudaDeviceSynchronize();
  if (status != cudaSuccess) raise_error("CUDA", what, file, line, cudaGetErrorString(status));  // at the kernel
}

namespace {

// The copy stream: created on first use, non-blocking (it does not wait for the legacy default
// stream), ordered against the compute stream only by the events the caller records and waits on.
cudaStream_t copy_stream(int device) { return stream_of_kind<1>(device, cudaStreamNonBlocking); }

cudaStream_t stream_of(int device, bool copy) { return copy ? copy_stream(device) : current_stream(device); }

}  // namespace

void* event_create(int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

// Called by GpuEvent's destructor and move assignment: never throws. After a kernel's fault the
// GPU refuses every call, this one too; a throw here, while the fault's error unwinds the stack,
// would abort the process instead of reporting the fault.
void event_destroy(void* event) {
  if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) cudaGetLastError();
}

void event_record(int device, bool copy, void* event) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  EMBER_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_of(device, copy)));
}

void stream_wait_event(int device, bool copy, void* event) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream_of(device, copy), static_cast<cudaEvent_t>(event), 0));
}

bool event_query(void* event) {
  const cudaError_t state = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (state == cudaErrorNotReady) {
    cudaGetLastError();  // NOTE: "not ready" is no error; clear it, or the next check reports it
    return false;
  }
  EMBER_CUDA_CHECK(state);
  return true;
}

void upload_on_copy_stream(int device, void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = copy_stream(device);
  if (staging_pool(device).upload(device, dst, src, size_t(bytes), stream)) return;
  // Over the staging limit: directly from the caller's memory, which must then be read before it returns.
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void synchronize(int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(current_stream(device)));
}

int64_t cudamalloc_count(int device) { return caching_allocator(device).malloc_count(); }

void allocator_record(int device, bool on) { caching_allocator(device).record(on); }
void allocator_fill_recorded(int device) { caching_allocator(device).fill_recorded(); }
int allocator_begin_capture(int device) { return caching_allocator(device).begin_capture(); }
void allocator_end_capture(int device) { caching_allocator(device).end_capture(); }
void allocator_release_pool(int device, int pool) { caching_allocator(device).release_pool(pool); }

}  // namespace cuda

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

Allocator& cuda_allocator(int index) { return cuda::caching_allocator(index); }

void copy_bytes_across_devices(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) {
  if (nbytes == 0) return;
  cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                        : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
  int device = src_device.is_cuda() ? src_device.index : dst_device.index;
  if (src_device.is_cuda() && dst_device.is_cuda() && src_device.index != dst_device.index) {
    // Between two GPUs: both streams drained first, then a peer copy.
    cuda::synchronize(src_device.index);
    cuda::synchronize(dst_device.index);
    EMBER_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, size_t(nbytes)));
    return;
  }
  cudaStream_t stream = cuda::use_device(device);
  // To the device: through a pinned staging block, without waiting (see StagingPool).
  if (kind == cudaMemcpyHostToDevice && cuda::staging_pool(device).upload(device, dst, src, size_t(nbytes), stream))
    return;
  // To the host: through a pinned block too, with one wait.
  if (kind == cudaMemcpyDeviceToHost && cuda::staging_pool(device).download(device, dst, src, size_t(nbytes), stream))
    return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(nbytes), kind, stream));
  // Within the device the stream orders the copy; otherwise the host side must not be reused (or
  // read) before the copy is done: wait for it.
  if (kind != cudaMemcpyDeviceToDevice) EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace ember
