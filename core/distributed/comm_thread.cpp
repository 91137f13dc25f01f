// The communication thread: a queue, a worker, and the first error kept for wait_all().
#include <exception>
#include <functional>
#include <mutex>
#include <utility>

#include "core/distributed/comm_thread.h"

namespace ember::distributed {

CommThread::CommThread() : thread_([this] { run(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  thread_.join();
}

void CommThread::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

bool CommThread::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ > 0 || !queue_.empty();
}

void CommThread::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  all_done_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void CommThread::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to do
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    if (error_) {  // an earlier job failed: skip, wait_all() reports that one
      if (queue_.empty()) all_done_.notify_all();
      continue;
    }
    ++running_;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    job = nullptr;  // release what the job held before reporting it done
    lock.lock();
    --running_;
    if (error && !error_) error_ = error;
    if (queue_.empty() && running_ == 0) all_done_.notify_all();
  }
}

}  // namespace ember::distributed
