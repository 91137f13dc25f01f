// The kernel side of the CPU emulator: what the translated .cu files call (translate.py writes
// these calls; nobody else should need to).
//
//   kernel<<<grid, block, shmem, stream>>>(a, b);
// becomes
//   ::ember_emu::launch(::ember_emu::config(grid, block, shmem, stream), "kernel",
//                       [](auto&... args) { kernel(args...); }, a, b);
//
// launch() evaluates the arguments once, on the host, like a real launch (they are copied into the
// kernel's parameters), checks the launch like a GPU would and queues it on its stream; when the
// stream runs it, the grid's blocks run one after another, the threads of a block as fibers
// (fiber.h) so that __syncthreads() is a real barrier (launch.cpp). Errors are not thrown: like a
// GPU, a launch error (bad sizes) is returned by the next cudaGetLastError() (EMBER_CUDA_LAUNCHED
// does that right after each launch), and an error while the kernel runs by the call that ran it
// (a synchronisation; on the legacy stream, which runs work at the call, at once).
//
// Shared memory: `extern __shared__ T name[];` becomes a pointer to the launch's dynamic shared
// memory (dynamic_shared<T>()), and `__shared__ T name[N];` a `static thread_local` array that is
// filled with 0xFF at the start of each block (poison_shared): see translate.py for why one static
// copy is right.
#pragma once
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ember_emu {

struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
};
inline LaunchConfig config(dim3 grid, dim3 block, size_t shared_bytes = 0, cudaStream_t stream = nullptr) {
  return LaunchConfig{grid, block, shared_bytes, stream};
}

// Checks the launch and queues it on its stream (streams.cpp): body(context) then runs as every
// thread of every block of the grid when the stream gets to it (launch.cpp).
void launch_grid(const LaunchConfig& config, const char* name, void (*body)(void*), std::shared_ptr<void> context);

template <typename Kernel, typename... Args>
void launch(const LaunchConfig& config, const char* name, Kernel kernel, Args&&... args) {
  // Evaluated once, like a launch's arguments, and kept until the launch has run (later than the
  // call: work on a stream is queued); each thread's call copies them into the kernel's by-value
  // parameters, so a thread that changes a parameter changes only its own copy.
  struct Context {
    Kernel kernel;
    std::tuple<std::decay_t<Args>...> params;
  };
  auto context = std::make_shared<Context>(Context{kernel, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)});
  launch_grid(config, name, [](void* c) {
    auto* ctx = static_cast<Context*>(c);
    std::apply(ctx->kernel, ctx->params);
  }, std::move(context));
}

// __syncthreads() (a macro in cuda_runtime.h passes the call's place in the .cu file).
void syncthreads(const char* file, int line);

// Written by translate.py as the first statement of every __global__ function: tells the launch
// which kernel runs (for its cudaFuncSetAttribute limits).
void kernel_entry(const void* kernel);

// The launch's dynamic shared memory (its `shmem` bytes; null when 0).
void* dynamic_shared_memory();
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_memory());
}

// Fills a static __shared__ variable with 0xFF the first time a thread of the current block
// reaches its declaration (a no-op for the block's other threads and later calls).
void poison_shared(void* ptr, size_t bytes);

}  // namespace ember_emu
