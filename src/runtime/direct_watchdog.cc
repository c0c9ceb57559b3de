#include "runtime/direct_watchdog.h"

#include <utility>

#include "core/thread_name.h"

namespace ringguard {

DirectWatchdog::DirectWatchdog(std::function<Status()> poll, std::function<void(const Status&)> onError,
                               std::chrono::milliseconds interval)
    : poll_(std::move(poll)), onError_(std::move(onError)), interval_(interval) {
  thread_ = std::thread([this] { run(); });
}

DirectWatchdog::~DirectWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DirectWatchdog::run() {
  nameThisThread("rg-watchdog");
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    Status st = poll_();
    if (!st.isOk()) {
      onError_(st);
      return;
    }
    lock.lock();
  }
}

}  // namespace ringguard
