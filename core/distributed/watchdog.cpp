// The watchdog: a table of operations in progress and a thread that looks at it a few times per timeout.
#include "core/distributed/watchdog.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ember::distributed {

Watchdog::Watchdog(double timeout_seconds, std::function<void(const std::string&)> on_expiry)
    : timeout_(timeout_seconds), on_expiry_(std::move(on_expiry)) {
  if (timeout_ > 0) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Watchdog::Scope::Scope(Watchdog& watchdog, std::string what) : watchdog_(watchdog) {
  std::lock_guard<std::mutex> lock(watchdog_.mutex_);
  id_ = watchdog_.next_id_++;
  if (watchdog_.timeout_ > 0) watchdog_.active_.emplace(id_, std::make_pair(std::move(what), Clock::now()));
}

Watchdog::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(watchdog_.mutex_);
  watchdog_.active_.erase(id_);
}

void Watchdog::run() {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
  // Looks a few times per timeout (at most once a second): an expiry is reported at most a
  // quarter of the timeout late.
  const auto period = std::min<Clock::duration>(std::chrono::seconds(1), timeout / 4);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [&] { return stopping_; })) {
    const auto now = Clock::now();
    for (const auto& [id, entry] : active_) {
      if (now - entry.second < timeout) continue;
      std::string what = entry.first;
      lock.unlock();
      on_expiry_(what);  // ends the process; if it returns, stop watching
      return;
    }
  }
}

}  // namespace ember::distributed
