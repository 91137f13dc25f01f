// CUDA device plumbing: device count, a plain allocator, copies between host and device, and
// one trivial kernel (fill). The full backend (caching allocator, every op) is a later step.
#include <cstdint>
#include <mutex>

#include "core/allocator.h"
#include "core/device_copy.h"
#include "cuda/check.h"

namespace ember {
namespace {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t nbytes) override {
    EMBER_CHECK(index_ < cuda_device_count(), "cuda:{} is not available ({} CUDA devices found)", index_,
                cuda_device_count());
    EMBER_CUDA_CHECK(cudaSetDevice(index_));
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, nbytes == 0 ? 1 : nbytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky error
      fail("out of GPU memory on cuda:{}: asked for {} bytes with {} bytes in use", index_, nbytes, stats_.allocated);
    }
    EMBER_CUDA_CHECK(status);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated += int64_t(nbytes);
    stats_.reserved += int64_t(nbytes);
    stats_.peak_allocated = stats_.peak_allocated > stats_.allocated ? stats_.peak_allocated : stats_.allocated;
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    cudaFree(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated -= int64_t(nbytes);
    stats_.reserved -= int64_t(nbytes);
  }
  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated = stats_.allocated;
  }
  void release_cached() override {}

 private:
  int index_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
};

// The trivial kernel: every element of a float buffer set to one value (grid-stride loop).
__global__ void fill_kernel(float* data, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Allocator& cuda_allocator(int index) {
  EMBER_CHECK(index >= 0 && index < 16, "cuda:{}: device index out of range", index);
  static CudaAllocator* allocators[16] = {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators[index] == nullptr) allocators[index] = new CudaAllocator(index);
  return *allocators[index];
}

void copy_bytes_across_devices(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) {
  cudaMemcpyKind kind = src_device.is_cpu() ? cudaMemcpyHostToDevice
                        : dst_device.is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  EMBER_CUDA_CHECK(cudaMemcpy(dst, src, size_t(nbytes), kind));
}

void cuda_fill_float(void* data, int64_t n, float value) {
  if (n == 0) return;
  int blocks = int((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  fill_kernel<<<blocks, 256>>>(static_cast<float*>(data), n, value);
  EMBER_CUDA_CHECK(cudaGetLastError());
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace ember
