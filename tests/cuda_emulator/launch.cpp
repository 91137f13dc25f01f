// Kernel launches on the CPU: the checks a GPU makes, then the grid's blocks one after another,
// the threads of each block on fibers (fiber.h) so that __syncthreads() is a real barrier.
//
// One block, step by step: every thread runs from the start until it reaches a barrier (or a warp
// collective) or ends, in order. Then, if every thread waits at the same barrier, all of them are
// resumed in turn, each until its next barrier or its end; and so on until every thread has ended.
// Threads are started by runners: a runner is a fiber that starts the next thread not yet started
// when the one it ran ends, on the same stack, without switching back; only a thread that stops
// at a barrier or a warp collective keeps its runner (its stack), and the next thread gets a new
// runner. So a kernel without barriers runs a whole block with one fiber switch, and its threads
// run exactly as before, one after another in the block's order (the fast path changes no order
// and stays correct whatever the kernel does).
// Errors a GPU would hang on or leave undefined are reported as launch errors, naming the kernel:
//   - a barrier that some threads of the block never reach (they ended, or wait at another one);
//   - block sizes over 1024 threads, grids over the limits, dynamic shared memory over 48 KiB
//     (unless cudaFuncSetAttribute raised the kernel's limit) or over 227 KiB.
// Aids that make wrong kernels fail rather than pass by luck:
//   - each block's shared memory starts as 0xFF bytes (NaN as float or double), as does fresh
//     cudaMalloc memory (memory.cpp): a read of something never written shows;
//   - odd-numbered blocks run their threads in reverse order, so a missing barrier between a
//     write by one thread and a read by another fails in one order or the other.
// A launch is checked at the call and queued on its stream (streams.cpp); the grid runs when the
// stream gets to it. What it cannot show: timing, or speed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_runtime.h"
#include "counters.h"
#include "fiber.h"
#include "state.h"

// Tells the tests they run on the emulator (tests/cuda_skip.h: cuda_emulated()).
extern "C" const bool ember_cuda_emulator = true;

thread_local constinit uint3 threadIdx = {0, 0, 0};
thread_local constinit uint3 blockIdx = {0, 0, 0};
thread_local constinit dim3 blockDim = dim3(1, 1, 1);
thread_local constinit dim3 gridDim = dim3(1, 1, 1);

namespace ember_emu {
namespace {

constexpr size_t kDefaultSharedLimit = 48 * 1024;   // per block, without cudaFuncSetAttribute
constexpr size_t kMaxSharedLimit = 227 * 1024;      // the most cudaFuncSetAttribute may allow (H100)

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), per kernel.
std::mutex attributes_mutex;
std::unordered_map<const void*, size_t> shared_limits;

// Thrown inside a CUDA thread by the emulator's own checks; the launch reports it.
struct LaunchError {
  cudaError_t code;
  std::string message;
};

struct CudaThread;

// A fiber that runs CUDA threads one after another on its stack (see the top of the file).
struct Runner {
  Fiber fiber;
  Stack* stack = nullptr;
};

struct CudaThread {
  Runner* runner = nullptr;  // the runner it runs on, while it has started and not ended
  uint3 index{};
  enum State { kReady, kAtBarrier, kAtWarp, kEnded } state = kReady;
  bool started = false;
  const char* barrier_file = nullptr;  // where it waits
  int barrier_line = 0;
  std::exception_ptr error;
  // At a warp collective (kAtWarp, warp_collective below): what it asked, and its result.
  WarpOp warp_op = WarpOp::kSync;
  unsigned warp_mask = 0;
  uint64_t warp_value = 0, warp_result = 0;
  int warp_param = 0, warp_width = 32;
};

bool resolve_warps(std::vector<CudaThread>& threads, std::vector<char>& resumed, std::string& problem);

// What the running launch needs to know, for the calls made from inside kernels.
struct Launch {
  const LaunchConfig* config = nullptr;
  const char* name = nullptr;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  const void* kernel = nullptr;  // set by kernel_entry
  unsigned char* dynamic_shared = nullptr;
  uint64_t block_serial = 0;     // which block runs (for poison_shared)
  std::vector<std::pair<void*, uint64_t>> poisoned;  // static __shared__ variable -> block it was filled for
  CudaThread* current = nullptr;
  // The block's threads in the order they run, and the next one to start (runner_main).
  std::vector<CudaThread*> order;
  size_t next_start = 0;
  int at_warp = 0;  // threads waiting at a warp collective
  // Reused from block to block (no allocation per block).
  std::vector<CudaThread*> live, waiting;
  std::vector<char> resumed;
  std::vector<Runner*> free_runners;
  // A round (see run_block): round 0 starts every thread; later rounds resume `queue` in order.
  // Each thread that stops switches straight to the next one (run_next); the last, to the scheduler.
  Fiber scheduler;  // run_block's own context
  bool round0 = false;
  const std::vector<CudaThread*>* queue = nullptr;
  size_t queue_next = 0;
  CudaThread* failed = nullptr;  // a thread that ended by throwing: the round stops there
};
thread_local Launch* running = nullptr;

Runner* acquire_runner(Launch& launch);
void release_runner(Launch& launch, Runner* r) { launch.free_runners.push_back(r); }

// Makes `t` the running CUDA thread (before switching to it).
void enter(Launch& launch, CudaThread* t) {
  threadIdx = t->index;
  launch.current = t;
  t->state = CudaThread::kReady;
}

// From a fiber that stops (its thread waits at a barrier or a warp collective, or its runner has no
// thread left): switches to what runs next in the round: in round 0 a new runner for the next
// thread not yet started, in later rounds the next thread of the queue; else (or after a thread
// threw) back to the scheduler. Returns when something switches back to `from`.
void run_next(Fiber& from) {
  Launch& launch = *running;
  if (launch.failed == nullptr) {
    if (launch.round0) {
      if (launch.next_start < launch.order.size()) return Fiber::jump(from, acquire_runner(launch)->fiber);
    } else if (launch.queue_next < launch.queue->size()) {
      CudaThread* next = (*launch.queue)[launch.queue_next++];
      enter(launch, next);
      return Fiber::jump(from, next->runner->fiber);
    }
  }
  Fiber::jump(from, launch.scheduler);
}

// A runner's body: starts the block's next thread, runs it, and when it ends starts the next one,
// until a thread stops at a barrier or a warp collective (the runner stays with it; switching to it
// continues that thread), a thread throws, or every thread has started.
void runner_main(void* arg) {
  auto* r = static_cast<Runner*>(arg);
  Launch& launch = *running;
  while (launch.next_start < launch.order.size()) {
    CudaThread* t = launch.order[launch.next_start++];
    t->runner = r;
    t->started = true;
    enter(launch, t);
    try {
      launch.body(launch.context);
    } catch (...) {
      t->error = std::current_exception();
    }
    t->state = CudaThread::kEnded;
    t->runner = nullptr;
    if (t->error) {  // the scheduler reports it; nothing more runs
      launch.failed = t;
      break;
    }
  }
  launch.current = nullptr;
  // NOTE: free again while still running on its stack: nothing takes a runner before the switch below.
  release_runner(launch, r);
  run_next(r->fiber);
  std::abort();  // never switched back to: a runner is started afresh when taken again
}

Runner* acquire_runner(Launch& launch) {
  Runner* r;
  if (!launch.free_runners.empty()) {
    r = launch.free_runners.back();
    launch.free_runners.pop_back();
  } else {
    r = new Runner;
    r->stack = acquire_stack();
  }
  r->fiber.start(runner_main, r, r->stack);
  return r;
}

std::string where(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  std::string s = slash != nullptr ? slash + 1 : file;
  return s + ":" + std::to_string(line);
}

std::string dims(dim3 d) {
  char text[48];
  std::snprintf(text, sizeof text, "(%u, %u, %u)", d.x, d.y, d.z);
  return text;
}

// The checks a GPU makes before it runs anything. Returns cudaSuccess or records the error.
cudaError_t check_config(const LaunchConfig& c, const char* name) {
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  std::string problem;
  cudaError_t code = cudaErrorInvalidConfiguration;
  if (threads == 0 || threads > 1024 || c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64)
    problem = "block " + dims(c.block) + " has " + std::to_string(threads) +
              " threads; a block has 1 to 1024 (x, y at most 1024, z at most 64)";
  else if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0)
    problem = "grid " + dims(c.grid) + " is empty";
  else if (c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535)
    problem = "grid " + dims(c.grid) + " is over the limits (x < 2^31, y and z at most 65535)";
  else if (c.shared_bytes > kMaxSharedLimit) {
    problem = std::to_string(c.shared_bytes) + " bytes of dynamic shared memory; at most 227 KiB per block";
    code = cudaErrorInvalidValue;
  } else if (!stream_is_valid(c.stream)) {
    problem = "the stream is not one cudaStreamCreate made (or it was destroyed)";
    code = cudaErrorInvalidResourceHandle;
  }
  if (problem.empty()) return cudaSuccess;
  return set_error(code, std::string("kernel ") + name + ": " + problem);
}

// The thread that ended with an error, rethrown as the launch's error. False.
template <typename Fail>
bool thread_failed(const std::exception_ptr& error, const Fail& fail) {
  try {
    std::rethrow_exception(error);
  } catch (const LaunchError& e) {
    return fail(e.code, e.message);
  } catch (const std::exception& e) {
    return fail(cudaErrorLaunchFailure, std::string("a thread threw: ") + e.what());
  } catch (...) {
    return fail(cudaErrorLaunchFailure, "a thread threw an exception");
  }
}

bool same_place(const CudaThread& a, const CudaThread& b) {
  return a.barrier_line == b.barrier_line &&
         (a.barrier_file == b.barrier_file || std::strcmp(a.barrier_file, b.barrier_file) == 0);
}

// Runs one block; returns false after recording the error that stopped it.
bool run_block(Launch& launch, std::vector<CudaThread>& threads, bool reverse) {
  const LaunchConfig& c = *launch.config;
  if (c.shared_bytes > 0) std::memset(launch.dynamic_shared, 0xFF, c.shared_bytes);
  std::vector<CudaThread*>& order = launch.order;
  order.clear();
  for (size_t i = 0; i < threads.size(); ++i) order.push_back(&threads[reverse ? threads.size() - 1 - i : i]);
  for (CudaThread* t : order) {
    t->state = CudaThread::kReady;
    t->started = false;
    t->error = nullptr;
    t->runner = nullptr;
  }
  launch.next_start = 0;
  launch.at_warp = 0;
  launch.failed = nullptr;
  auto fail = [&](cudaError_t code, const std::string& message) {
    for (CudaThread& t : threads)  // threads stopped at a barrier are abandoned: their runners reused
      if (t.runner != nullptr) release_runner(launch, t.runner), t.runner = nullptr;
    set_error(code, std::string("kernel ") + launch.name + ", block " + dims(dim3(blockIdx)) + ": " + message);
    return false;
  };
  // Round 0: every thread from its start, in order (runners started as threads stop, run_next).
  launch.round0 = true;
  Fiber::jump(launch.scheduler, acquire_runner(launch)->fiber);
  launch.round0 = false;
  launch.current = nullptr;
  if (launch.failed != nullptr) return thread_failed(launch.failed->error, fail);
  std::vector<CudaThread*>& live = launch.live;
  std::vector<CudaThread*>& waiting = launch.waiting;
  std::vector<char>& resumed = launch.resumed;
  for (int round = 0;; ++round) {
    if (round > 0) {  // the threads of `live` in turn, each switching to the next (run_next)
      launch.queue = &live;
      launch.queue_next = 1;
      enter(launch, live.front());
      Fiber::jump(launch.scheduler, live.front()->runner->fiber);
      launch.current = nullptr;
      if (launch.failed != nullptr) return thread_failed(launch.failed->error, fail);
    }
    // Warp collectives first: a warp whose lanes have all arrived exchanges its values, and those
    // lanes run on (in the block's order); a lane that cannot arrive is an error.
    if (launch.at_warp > 0) {
      resumed.assign(threads.size(), 0);
      std::string problem;
      if (!resolve_warps(threads, resumed, problem)) return fail(cudaErrorLaunchFailure, problem);
      waiting.clear();
      for (CudaThread* t : order)
        if (resumed[size_t(t - threads.data())]) waiting.push_back(t);
      if (!waiting.empty()) {
        launch.at_warp -= int(waiting.size());
        std::swap(live, waiting);
        continue;
      }
    }
    waiting.clear();
    for (CudaThread* t : order)
      if (t->state == CudaThread::kAtBarrier) waiting.push_back(t);
    if (waiting.empty()) return true;
    const CudaThread* first = waiting.front();
    if (waiting.size() < threads.size()) {
      const size_t ended = threads.size() - waiting.size();
      return fail(cudaErrorLaunchFailure,
                  "divergent __syncthreads(): " + std::to_string(waiting.size()) + " threads wait at " +
                      where(first->barrier_file, first->barrier_line) + " (barrier " + std::to_string(round + 1) +
                      ") but " + std::to_string(ended) + " threads of the block ended without reaching it");
    }
    for (const CudaThread* t : waiting)
      if (!same_place(*t, *first))
        return fail(cudaErrorLaunchFailure, "divergent __syncthreads(): threads of one block wait at different "
                                            "barriers, " + where(first->barrier_file, first->barrier_line) + " and " +
                                                where(t->barrier_file, t->barrier_line));
    std::swap(live, waiting);
  }
}

}  // namespace

namespace {

// With EMBER_EMULATOR_LAUNCHES=1 in the environment, the launches of each kernel (and the cuBLAS
// and cuDNN calls, which run kernels of their own on a GPU) are counted and the counts printed to
// stderr when the program ends (how many kernels an op or a training step launches: on a GPU, each
// launch costs a few microseconds of the host's time). With EMBER_EMULATOR_LAUNCHES=time, also the
// seconds the emulator spent running each kernel (where the emulator's own time goes; says nothing
// of a GPU's).
struct LaunchCounts {
  const char* const env = std::getenv("EMBER_EMULATOR_LAUNCHES");
  const bool timed = env != nullptr && std::strcmp(env, "time") == 0;
  const bool enabled = timed || (env != nullptr && env[0] == '1');
  std::mutex mutex;
  std::map<std::string, int64_t> by_kernel;
  std::map<std::string, double> seconds;
  void count(const char* name) {
    if (!enabled) return;
    std::lock_guard<std::mutex> lock(mutex);
    ++by_kernel[name];
  }
  void add_time(const char* name, double s) {
    std::lock_guard<std::mutex> lock(mutex);
    seconds[name] += s;
  }
  ~LaunchCounts() {
    if (!enabled) return;
    int64_t total = 0;
    for (const auto& [name, n] : by_kernel) total += n;
    std::fprintf(stderr, "emulator: %lld kernel launches\n", static_cast<long long>(total));
    for (const auto& [name, n] : by_kernel) {
      auto found = seconds.find(name);
      if (timed)  // the seconds of a cuBLAS or cuDNN call are not measured (0)
        std::fprintf(stderr, "  %8lld  %8.3f s  %s\n", static_cast<long long>(n),
                     found != seconds.end() ? found->second : 0.0, name.c_str());
      else
        std::fprintf(stderr, "  %8lld  %s\n", static_cast<long long>(n), name.c_str());
    }
  }
};
LaunchCounts launch_counts;

}  // namespace

void count_launch(const char* name, cudaStream_t stream) {
  if (stream_capturing(stream)) return;  // recorded into a graph: its launch counts
  launch_counts.count(name);
  note_library_call(name);  // only cuBLAS and cuDNN call this; kernels are counted by launch_grid
}

namespace {

// EMBER_EMULATOR_FAULT: an asynchronous kernel fault, injected for the fault tests. The value is
//   <kernel name>      the first run of that kernel faults,
//   <kernel name>:<k>  its k-th run (k >= 1),
//   <n>                the n-th kernel run of the program (n >= 1), whatever its name.
// The faulting grid does not run (its outputs keep what they held) and fails as a GPU kernel that
// touched an illegal address would: cudaErrorLaunchFailure, reported by the next synchronising
// call (or cudaEventQuery), with the kernel's name in cudaGetErrorString's text. Runs are counted
// when the stream runs them (a graph's replays count too), so a fault lands mid-step.
struct FaultInjection {
  std::string spec, kernel;
  int64_t nth = 0;     // of `kernel` when it is named, else of all runs
  int64_t runs = 0;    // runs counted so far (of `kernel`, or of all)
  bool fired = false;
  std::mutex mutex;
  FaultInjection() {
    const char* env = std::getenv("EMBER_EMULATOR_FAULT");
    if (env == nullptr || env[0] == '\0') return;
    spec = env;
    const size_t colon = spec.rfind(':');
    const std::string count = colon == std::string::npos ? spec : spec.substr(colon + 1);
    const bool numeric = !count.empty() && count.find_first_not_of("0123456789") == std::string::npos;
    kernel = colon != std::string::npos ? spec.substr(0, colon) : numeric ? std::string() : spec;
    nth = numeric ? std::atoll(count.c_str()) : 1;
    if (nth < 1 || (colon != std::string::npos && (kernel.empty() || !numeric))) {
      std::fprintf(stderr, "CUDA emulator: EMBER_EMULATOR_FAULT='%s': expected <kernel>, <kernel>:<k> or <n> (k, n >= 1)\n",
                   spec.c_str());
      std::abort();
    }
  }
  // Whether this run of kernel `name` is the one to fault.
  bool hits(const char* name) {
    if (spec.empty()) return false;
    std::lock_guard<std::mutex> lock(mutex);  // streams may run on several host threads
    if (fired || (!kernel.empty() && kernel != name)) return false;
    fired = ++runs == nth;
    return fired;
  }
};
FaultInjection fault_injection;

// Runs the grid (the queued launch, when its stream gets to it). Its error, also recorded.
cudaError_t run_grid(const LaunchConfig& config, const char* name, void (*body)(void*), void* context) {
  if (running != nullptr)
    return set_error(cudaErrorLaunchFailure, std::string("kernel ") + name + " ran from inside kernel " + running->name);
  if (fault_injection.hits(name)) {
    set_error(cudaErrorLaunchFailure, std::string("kernel ") + name + ": a fault injected by EMBER_EMULATOR_FAULT=" +
                                          fault_injection.spec + " (an illegal address, as a GPU would report it)");
    break_device(cudaGetErrorString(cudaErrorLaunchFailure));  // every later call fails too (state.h)
    return cudaErrorLaunchFailure;
  }
  Launch launch;
  launch.config = &config;
  launch.name = name;
  launch.body = body;
  launch.context = context;
  // Aligned to 128 bytes, as a GPU's dynamic shared memory is at least (the tensor-core attention kernels
  // declare theirs __align__(128) and lay their WMMA tiles out from it).
  constexpr size_t kSharedAlign = 128;
  std::vector<unsigned char> shared(config.shared_bytes + kSharedAlign);
  if (config.shared_bytes > 0) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(shared.data());
    launch.dynamic_shared = shared.data() + (kSharedAlign - start % kSharedAlign) % kSharedAlign;
  }
  const uint3 saved_thread = threadIdx, saved_block = blockIdx;
  const dim3 saved_block_dim = blockDim, saved_grid_dim = gridDim;
  gridDim = config.grid;
  blockDim = config.block;
  std::vector<CudaThread> threads(size_t(config.block.x) * config.block.y * config.block.z);
  for (size_t i = 0; i < threads.size(); ++i)
    threads[i].index = uint3{unsigned(i % config.block.x), unsigned(i / config.block.x % config.block.y),
                             unsigned(i / (size_t(config.block.x) * config.block.y))};
  running = &launch;
  DeviceAccess access;  // the kernel may touch device memory (EMBER_EMULATOR_PROTECT)
  uint64_t serial = 0;
  bool ok = true;
  for (unsigned z = 0; ok && z < config.grid.z; ++z)
    for (unsigned y = 0; ok && y < config.grid.y; ++y)
      for (unsigned x = 0; ok && x < config.grid.x; ++x, ++serial) {
        blockIdx = uint3{x, y, z};
        launch.block_serial = serial + 1;
        ok = run_block(launch, threads, serial % 2 == 1);
      }
  running = nullptr;
  for (Runner* r : launch.free_runners) release_stack(r->stack), delete r;
  threadIdx = saved_thread, blockIdx = saved_block, blockDim = saved_block_dim, gridDim = saved_grid_dim;
  return ok ? cudaSuccess : cudaPeekAtLastError();
}

}  // namespace

void launch_grid(const LaunchConfig& config, const char* name, void (*body)(void*), std::shared_ptr<void> context) {
  if (!stream_capturing(config.stream)) {
    launch_counts.count(name);
    note_kernel_launch(name, uint64_t(config.grid.x) * config.grid.y * config.grid.z);
  }
  if (running != nullptr) {
    set_error(cudaErrorLaunchFailure, std::string("kernel ") + name + " launched from inside kernel " +
                                          running->name + " (dynamic parallelism is not emulated)");
    return;
  }
  if (check_config(config, name) != cudaSuccess) return;
  if (device_broken() != cudaSuccess) return;  // the launch error is the fault (state.h)
  if (dry_mode()) {  // queued in its place, as nothing (counters.h)
    enqueue(config.stream, [] { return cudaSuccess; });
    return;
  }
  enqueue(config.stream, [config, name, body, context = std::move(context)] {
    if (!launch_counts.timed) return run_grid(config, name, body, context.get());
    const auto start = std::chrono::steady_clock::now();
    const cudaError_t status = run_grid(config, name, body, context.get());
    launch_counts.add_time(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return status;
  });
}

void syncthreads(const char* file, int line) {
  if (running == nullptr || running->current == nullptr) {
    // Never silently: a barrier outside a kernel cannot be honoured.
    std::fprintf(stderr, "CUDA emulator: __syncthreads() at %s:%d called outside a kernel\n", file, line);
    std::abort();
  }
  CudaThread* t = running->current;
  t->state = CudaThread::kAtBarrier;
  t->barrier_file = file;
  t->barrier_line = line;
  run_next(t->runner->fiber);
}

// ---- Warps: the 32 lanes of a warp meet at each warp collective (__shfl_*_sync, __ballot_sync,
// __any_sync, __all_sync, __syncwarp): each lane waits there (a fiber switch) until every lane of
// its mask has arrived, then all get their results at once, so the warp runs in lockstep exactly
// where the kernel asks for it. Checked, as a GPU leaves undefined or hangs: the mask must hold the
// calling lane and name lanes that exist; every lane of the mask must reach the same collective
// (same call, same mask), not end or wait at __syncthreads; a shuffle must read a lane of the mask.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width, const char* file, int line) {
  if (running == nullptr || running->current == nullptr) {
    std::fprintf(stderr, "CUDA emulator: a warp collective at %s:%d called outside a kernel\n", file, line);
    std::abort();
  }
  CudaThread* t = running->current;
  t->state = CudaThread::kAtWarp;
  t->barrier_file = file;
  t->barrier_line = line;
  t->warp_op = op;
  t->warp_mask = mask;
  t->warp_value = value;
  t->warp_param = param;
  t->warp_width = width;
  ++running->at_warp;
  run_next(t->runner->fiber);
  return t->warp_result;
}

namespace {

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kSync: return "__syncwarp";
    case WarpOp::kShfl: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kAll: return "__all_sync";
  }
  return "a warp collective";
}

std::string hex_mask(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

}  // namespace

namespace {

// After every thread of the block has run until it blocked: resolves each group of lanes waiting
// at one warp collective, marking them in `resumed`. False (and `problem`) for a broken collective.
// The common case, checked and exchanged in one pass: all 32 lanes of a warp wait at the same
// collective with the full mask and width 32 (a shuffle then reads a lane of its own warp: always
// in the mask). False when the warp is not in that case (the general path below then checks it).
bool resolve_full_warp(CudaThread* lanes, char* resumed) {
  const CudaThread& t = lanes[0];
  if (t.state != CudaThread::kAtWarp || t.warp_mask != 0xFFFFFFFFu || t.warp_width != 32) return false;
  uint64_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const CudaThread& o = lanes[lane];
    if (o.state != CudaThread::kAtWarp || o.warp_mask != 0xFFFFFFFFu || o.warp_width != 32 || o.warp_op != t.warp_op ||
        !same_place(o, t) || resumed[lane])
      return false;
    if (o.warp_value != 0) ballot |= uint64_t(1) << lane;
  }
  for (int lane = 0; lane < 32; ++lane) {
    CudaThread& o = lanes[lane];
    const int p = o.warp_param;
    int source = lane;
    switch (o.warp_op) {
      case WarpOp::kShfl: source = ((p % 32) + 32) % 32; break;
      case WarpOp::kShflUp: source = lane >= p ? lane - p : lane; break;
      case WarpOp::kShflDown: source = lane + p < 32 ? lane + p : lane; break;
      case WarpOp::kShflXor: source = (lane ^ p) < 32 ? lane ^ p : lane; break;
      default: break;
    }
    if (source < 0 || source >= 32) return false;  // (a negative delta): the general path reports it
  }
  for (int lane = 0; lane < 32; ++lane) {
    CudaThread& o = lanes[lane];
    const int p = o.warp_param;
    switch (o.warp_op) {
      case WarpOp::kBallot: o.warp_result = ballot; break;
      case WarpOp::kAny: o.warp_result = ballot != 0; break;
      case WarpOp::kAll: o.warp_result = ballot == 0xFFFFFFFFu; break;
      case WarpOp::kSync: o.warp_result = 0; break;
      case WarpOp::kShfl: o.warp_result = lanes[((p % 32) + 32) % 32].warp_value; break;
      case WarpOp::kShflUp: o.warp_result = lanes[lane >= p ? lane - p : lane].warp_value; break;
      case WarpOp::kShflDown: o.warp_result = lanes[lane + p < 32 ? lane + p : lane].warp_value; break;
      case WarpOp::kShflXor: o.warp_result = lanes[(lane ^ p) < 32 ? lane ^ p : lane].warp_value; break;
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    lanes[lane].state = CudaThread::kReady;
    resumed[lane] = 1;
  }
  return true;
}

bool resolve_warps(std::vector<CudaThread>& threads, std::vector<char>& resumed, std::string& problem) {
  const size_t warps = (threads.size() + 31) / 32;
  for (size_t w = 0; w < warps; ++w) {
    const size_t first = w * 32, lanes = std::min<size_t>(32, threads.size() - first);
    if (lanes == 32 && resolve_full_warp(&threads[first], &resumed[first])) continue;
    for (size_t lane = 0; lane < lanes; ++lane) {
      CudaThread& t = threads[first + lane];
      if (t.state != CudaThread::kAtWarp || resumed[first + lane]) continue;
      // Named only when something is wrong (this runs for every warp at every collective).
      auto what = [&] {
        return std::string(warp_op_name(t.warp_op)) + " at " + where(t.barrier_file, t.barrier_line) + " with mask " +
               hex_mask(t.warp_mask) + " (warp " + std::to_string(w) + ")";
      };
      if ((t.warp_mask >> lane & 1u) == 0) {
        problem = what() + ": lane " + std::to_string(lane) + " calls it with a mask that leaves it out";
        return false;
      }
      if (t.warp_width < 1 || t.warp_width > 32 || (t.warp_width & (t.warp_width - 1)) != 0) {
        problem = what() + ": width " + std::to_string(t.warp_width) + " is not a power of two up to 32";
        return false;
      }
      for (size_t other = 0; other < 32; ++other) {
        if ((t.warp_mask >> other & 1u) == 0) continue;
        if (other >= lanes) {
          problem = what() + ": the mask names lane " + std::to_string(other) + ", but the warp has " +
                    std::to_string(lanes) + " threads";
          return false;
        }
        const CudaThread& o = threads[first + other];
        std::string lost;
        if (o.state == CudaThread::kEnded) lost = "ended without reaching it";
        else if (o.state == CudaThread::kAtBarrier) lost = "waits at __syncthreads() at " + where(o.barrier_file, o.barrier_line);
        else if (o.warp_mask != t.warp_mask || o.warp_op != t.warp_op || !same_place(o, t))
          lost = "waits at " + std::string(warp_op_name(o.warp_op)) + " at " + where(o.barrier_file, o.barrier_line) +
                 " with mask " + hex_mask(o.warp_mask);
        if (!lost.empty()) {
          problem = what() + ": lane " + std::to_string(other) + " of the mask " + lost;
          return false;
        }
      }
      // Every lane of the mask is here: exchange.
      uint64_t ballot = 0;
      for (size_t other = 0; other < 32; ++other)
        if ((t.warp_mask >> other & 1u) != 0 && threads[first + other].warp_value != 0) ballot |= uint64_t(1) << other;
      for (size_t other = 0; other < 32; ++other) {
        if ((t.warp_mask >> other & 1u) == 0) continue;
        CudaThread& o = threads[first + other];
        const int width = o.warp_width, segment = int(other) / width * width, p = o.warp_param;
        int source = int(other);
        switch (o.warp_op) {
          case WarpOp::kShfl: source = segment + ((p % width) + width) % width; break;
          case WarpOp::kShflUp: source = int(other) - segment >= p ? int(other) - p : int(other); break;
          case WarpOp::kShflDown: source = int(other) - segment + p < width ? int(other) + p : int(other); break;
          case WarpOp::kShflXor: source = (int(other) ^ p) < segment + width ? int(other) ^ p : int(other); break;
          default: break;
        }
        if (source < 0 || source >= 32 || (t.warp_mask >> source & 1u) == 0) {
          problem = what() + ": lane " + std::to_string(other) + " reads lane " + std::to_string(source) +
                    ", which is not in the mask (undefined on a GPU)";
          return false;
        }
        switch (o.warp_op) {
          case WarpOp::kBallot: o.warp_result = ballot; break;
          case WarpOp::kAny: o.warp_result = ballot != 0; break;
          case WarpOp::kAll: o.warp_result = ballot == t.warp_mask; break;
          case WarpOp::kSync: o.warp_result = 0; break;
          default: o.warp_result = threads[first + size_t(source)].warp_value; break;
        }
      }
      for (size_t other = 0; other < 32; ++other)
        if ((t.warp_mask >> other & 1u) != 0) {
          threads[first + other].state = CudaThread::kReady;
          resumed[first + other] = true;
        }
    }
  }
  return true;
}

}  // namespace

void kernel_entry(const void* kernel) {
  if (running == nullptr || running->kernel == kernel) return;
  running->kernel = kernel;
  size_t limit = kDefaultSharedLimit;
  {
    std::lock_guard<std::mutex> lock(attributes_mutex);
    auto found = shared_limits.find(kernel);
    if (found != shared_limits.end()) limit = found->second;
  }
  const size_t asked = running->config->shared_bytes;
  if (asked > limit)  // thrown before the kernel's first statement: nothing has run yet
    throw LaunchError{cudaErrorInvalidValue,
                      std::to_string(asked) + " bytes of dynamic shared memory, over the kernel's limit of " +
                          std::to_string(limit) + " (raise it with cudaFuncSetAttribute("
                          "cudaFuncAttributeMaxDynamicSharedMemorySize), up to 227 KiB)"};
}

void* dynamic_shared_memory() { return running != nullptr ? running->dynamic_shared : nullptr; }

void poison_shared(void* ptr, size_t bytes) {
  if (running == nullptr) return;
  for (auto& entry : running->poisoned) {
    if (entry.first == ptr) {
      if (entry.second != running->block_serial) std::memset(ptr, 0xFF, bytes), entry.second = running->block_serial;
      return;
    }
  }
  std::memset(ptr, 0xFF, bytes);
  running->poisoned.emplace_back(ptr, running->block_serial);
}

}  // namespace ember_emu

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  using namespace ember_emu;
  if (func == nullptr) return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: no kernel given");
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;  // a hint; nothing to emulate
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute not emulated");
  if (value < 0 || size_t(value) > kMaxSharedLimit)
    return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                                " bytes of dynamic shared memory; at most 227 KiB (232448)");
  std::lock_guard<std::mutex> lock(attributes_mutex);
  shared_limits[func] = size_t(value);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  using namespace ember_emu;
  if (device < 0 || device >= device_count())
    return set_error(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: no emulated device " + std::to_string(device));
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(kDefaultSharedLimit); return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kMaxSharedLimit); return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;  // an H100's 9.0 (mma.h's WMMA)
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string(int(attr)) +
                                              " not emulated");
}
