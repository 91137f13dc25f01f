// A watchdog for blocking collectives: a thread that ends the job when one of them runs past its
// deadline, so that a dead or stuck peer makes the others stop with an error, never hang.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ember::distributed {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // on_expiry(what) is called on the watchdog's thread with the description of the first watched
  // operation older than timeout_seconds; it is expected to end the process. 0 = no watchdog.
  Watchdog(double timeout_seconds, std::function<void(const std::string& what)> on_expiry);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_seconds() const { return timeout_; }

  // Watches an operation for as long as it lives: Watchdog::Scope scope(watchdog, "all_reduce ...");
  class Scope {
   public:
    Scope(Watchdog& watchdog, std::string what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& watchdog_;
    uint64_t id_;
  };

 private:
  void run();

  double timeout_;
  std::function<void(const std::string&)> on_expiry_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, std::pair<std::string, Clock::time_point>> active_;  // id -> (what, start)
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ember::distributed
