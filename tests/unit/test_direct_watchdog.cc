// The direct path's watchdog (runtime/direct_watchdog.h) with a poll of the test's own: the first error is
// reported once, within a few intervals, and never after the watchdog is gone. (On the GPU, the peer
// path's record: PeerCommunicatorCollectives.TheWatchdogAbortsAfterAnErrorNoOneWaitedFor.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/direct_watchdog.h"

namespace ringguard {
namespace {

using namespace std::chrono_literals;

TEST(DirectWatchdog, ReportsTheFirstErrorOnceAndStopsPolling) {
  std::atomic<int> polls{0};
  std::mutex m;
  std::vector<std::string> reported;
  {
    DirectWatchdog w(
        [&] {
          const int n = ++polls;
          if (n < 3) return Status::ok();
          return Status(StatusCode::kTimeout, "poll " + std::to_string(n));
        },
        [&](const Status& st) {
          std::lock_guard<std::mutex> lock(m);
          reported.push_back(st.message());
        },
        1ms);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(m);
        if (!reported.empty()) break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no report after " << polls.load() << " polls";
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(20ms);  // twenty intervals: a second poll would show
  }
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0], "poll 3");
  EXPECT_EQ(polls.load(), 3);
}

TEST(DirectWatchdog, DestroyedWhileCleanItReportsNothingAndReturnsAtOnce) {
  std::atomic<int> polls{0};
  std::atomic<int> reports{0};
  const auto start = std::chrono::steady_clock::now();
  {
    DirectWatchdog w(
        [&] {
          ++polls;
          return Status::ok();
        },
        [&](const Status&) { ++reports; }, std::chrono::hours(1));
  }
  // An hour's interval: the destructor wakes the thread instead of waiting it out.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(polls.load(), 0);
  EXPECT_EQ(reports.load(), 0);
}

}  // namespace
}  // namespace ringguard
