// A communication thread: runs queued jobs (collectives) one after another, in the order they
// were queued, while the thread that queued them goes on computing.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace ember::distributed {

class CommThread {
 public:
  CommThread();
  ~CommThread();  // finishes the queued jobs, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  void submit(std::function<void()> job);
  // Returns when every job queued so far has run; rethrows the first exception one threw (the
  // jobs queued after a failed one are skipped: their collectives could no longer match).
  void wait_all();
  // Whether the calling thread is this communication thread.
  bool is_current() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Whether jobs are queued or running.
  bool busy() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_, all_done_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace ember::distributed
