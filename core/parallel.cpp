// The CPU thread pool behind parallel_for: persistent workers that spin briefly, then sleep on a futex.
#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EMBER_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define EMBER_CPU_RELAX() __asm__ __volatile__("yield")  // ARM's spin-wait hint, as pause is x86's
#else
#define EMBER_CPU_RELAX() std::this_thread::yield()
#endif

namespace ember {
namespace {

// How many times a waiting thread polls before it sleeps. A parallel_for is typically followed
// by another within microseconds (a training step issues thousands), so a short spin avoids
// the futex wake-up latency; sleeping afterwards keeps idle workers off the (shared) cores.
constexpr int kSpinIterations = 2000;

// True on pool workers and on a caller while it runs its own chunk: parallel_for inside
// such a thread runs inline (no nested parallelism).
thread_local bool t_inside_parallel_region = false;

int default_thread_count() {
  if (const char* env = std::getenv("EMBER_NUM_THREADS")) {
    char* end = nullptr;
    long value = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && value >= 1 && value <= 4096) return static_cast<int>(value);
  }
  unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

// Calls fn on chunk `index` of `chunks` equal splits of [begin, end).
// NOTE: this split is the whole determinism contract: it depends only on the arguments.
void run_chunk(const std::function<void(int64_t, int64_t)>& fn, int64_t begin, int64_t end,
               int64_t chunks, int64_t index) {
  int64_t length = end - begin;
  int64_t chunk_begin = begin + length * index / chunks;
  int64_t chunk_end = begin + length * (index + 1) / chunks;
  if (chunk_begin < chunk_end) fn(chunk_begin, chunk_end);
}

class ThreadPool {
 public:
  ThreadPool() : thread_count_(default_thread_count()) {}
  ~ThreadPool() { stop_workers(); }

  int thread_count() const { return thread_count_.load(std::memory_order_relaxed); }

  void set_thread_count(int n) {
    EMBER_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got {}", n);
    acquire_busy();
    if (n != thread_count()) {
      stop_workers();  // restarted lazily at the next parallel_for with the new size
      thread_count_.store(n, std::memory_order_relaxed);
    }
    busy_.store(false, std::memory_order_release);
  }

  void run(int64_t begin, int64_t end, int64_t grain,
           const std::function<void(int64_t, int64_t)>& fn) {
    if (begin >= end) return;
    int64_t length = end - begin;
    grain = grain < 1 ? 1 : grain;
    // Rounding down keeps every chunk at least `grain` long (length < 2 * grain: one chunk).
    int64_t chunks = std::min<int64_t>(thread_count(), length / grain);
    // Inline: a single chunk, a nested call, or another thread is using the pool right now.
    if (chunks <= 1 || t_inside_parallel_region || busy_.exchange(true, std::memory_order_acquire)) {
      fn(begin, end);
      return;
    }
    if (static_cast<int>(workers_.size()) + 1 != thread_count()) start_workers();

    // Publish the job; the generation bump (release) makes it visible to the workers.
    job_fn_ = &fn;
    job_begin_ = begin;
    job_end_ = end;
    job_chunks_ = chunks;
    error_ = nullptr;
    // NOTE: every worker acknowledges every job, even one with no chunk for it, so that no
    // worker can still be reading job_* when the next job overwrites them.
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();

    t_inside_parallel_region = true;
    std::exception_ptr caller_error;
    try {
      run_chunk(fn, begin, end, chunks, 0);
    } catch (...) {
      caller_error = std::current_exception();
    }
    t_inside_parallel_region = false;
    wait_for_workers();
    std::exception_ptr worker_error = error_;
    busy_.store(false, std::memory_order_release);
    if (caller_error) std::rethrow_exception(caller_error);
    if (worker_error) std::rethrow_exception(worker_error);
  }

 private:
  void acquire_busy() {
    while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  }

  void start_workers() {
    stop_workers();
    stop_.store(false, std::memory_order_relaxed);
    int count = thread_count() - 1;
    workers_.reserve(count);
    // More threads than cores: a spinning thread would only take time from one doing work.
    const unsigned cores = std::thread::hardware_concurrency();
    spin_iterations_ = cores != 0 && static_cast<unsigned>(thread_count()) > cores ? 0 : kSpinIterations;
    // NOTE: a worker must know the generation from before its first job: reading it on its
    // own, after the caller has already published that job, would make it miss the job.
    uint32_t current = generation_.load(std::memory_order_relaxed);
    for (int index = 1; index <= count; ++index) {
      workers_.emplace_back([this, index, current] { worker_loop(index, current); });
    }
  }

  void stop_workers() {
    if (workers_.empty()) return;
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
  }

  void worker_loop(int index, uint32_t seen) {
    t_inside_parallel_region = true;
    while (true) {
      uint32_t now = seen;
      for (int spin = 0; spin < spin_iterations_ && now == seen; ++spin) {
        EMBER_CPU_RELAX();
        now = generation_.load(std::memory_order_acquire);
      }
      while (now == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        now = generation_.load(std::memory_order_acquire);
      }
      seen = now;
      if (stop_.load(std::memory_order_relaxed)) return;
      if (index < job_chunks_) {  // a job may have fewer chunks than threads
        try {
          run_chunk(*job_fn_, job_begin_, job_end_, job_chunks_, index);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
        }
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  void wait_for_workers() {
    int left = pending_.load(std::memory_order_acquire);
    for (int spin = 0; spin < spin_iterations_ && left != 0; ++spin) {
      EMBER_CPU_RELAX();
      left = pending_.load(std::memory_order_acquire);
    }
    while (left != 0) {
      pending_.wait(left, std::memory_order_acquire);
      left = pending_.load(std::memory_order_acquire);
    }
  }

  std::atomic<int> thread_count_;
  std::vector<std::thread> workers_;
  int spin_iterations_ = kSpinIterations;  // set before the workers start, then only read
  std::atomic<bool> busy_{false};  // one parallel_for at a time uses the workers
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> generation_{0};  // bumped once per job (and to stop)
  std::atomic<int> pending_{0};          // workers that have not finished the current job

  // The current job, written by the caller before the generation bump.
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_begin_ = 0;
  int64_t job_end_ = 0;
  int64_t job_chunks_ = 0;

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

ThreadPool& pool() {
  static ThreadPool instance;
  return instance;
}

}  // namespace

int num_threads() { return pool().thread_count(); }

int threads_here() { return t_inside_parallel_region ? 1 : num_threads(); }

void set_num_threads(int n) { pool().set_thread_count(n); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  pool().run(begin, end, grain, fn);
}

}  // namespace ember
