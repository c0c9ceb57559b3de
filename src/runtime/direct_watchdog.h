#pragma once
// The direct path's watchdog (runtime/direct_path.h): a thread that polls the path's error record while the
// communicator lives, so a kernel's error is seen where no one waits for it (a replayed CUDA graph, an
// all_reduce whose Work is dropped), as c10d's NCCL watchdog does. The first error is handed to `onError`
// once (the communicator logs it and aborts: docs/design/protocol.md, "Deadlines, errors, abort"); then the
// thread ends. The destructor stops and joins it, so `onError` never runs after it.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "ringguard/core/status.h"

namespace ringguard {

class DirectWatchdog {
 public:
  // poll(): the path's first error so far, OK when none (non-blocking, callable from any thread).
  DirectWatchdog(std::function<Status()> poll, std::function<void(const Status&)> onError,
                 std::chrono::milliseconds interval);
  ~DirectWatchdog();
  DirectWatchdog(const DirectWatchdog&) = delete;
  DirectWatchdog& operator=(const DirectWatchdog&) = delete;

  // The interval the communicator uses: a mapped word read ten times a second costs nothing measurable, and
  // an error is reported well inside any timeout a user sets (at least 1 ms, usually seconds).
  static constexpr std::chrono::milliseconds kInterval{100};

 private:
  void run();

  std::function<Status()> poll_;
  std::function<void(const Status&)> onError_;
  const std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringguard
