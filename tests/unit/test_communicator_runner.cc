// Who runs a queued host collective: the progress thread, or the caller that waits for it
// (Communicator::helpWhileWaiting). Either way one runner at a time, in queue order.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "loopback_util.h"

namespace ringguard {
namespace {

constexpr int kQueued = 12;

// Rank r's input of collective k: every element is 1000 * k + r + 1, so the sum over n ranks is
// n * 1000 * k + n * (n + 1) / 2 whatever the order.
int32_t input(int rank, int k) { return 1000 * k + rank + 1; }
int32_t sumOver(int n, int k) { return n * 1000 * k + n * (n + 1) / 2; }

class CommunicatorRunner : public ::testing::TestWithParam<int> {};

// Twelve collectives queued at once and only the last one waited for: the waiting caller runs the ones
// ahead of it in order (a different order would mismatch fingerprints across ranks), and every Work is
// complete with its own result.
TEST_P(CommunicatorRunner, WaitingForTheLastRunsTheQueueInOrder) {
  const int n = GetParam();
  testing::LoopbackGroup g(n, Options{});
  g.run([&](int rank, Communicator& c) {
    std::vector<std::vector<int32_t>> bufs(kQueued);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kQueued; ++k) {
      bufs[size_t(k)].assign(size_t(5 + k), input(rank, k));
      works.push_back(c.allreduceAsync(bufs[size_t(k)].data(), bufs[size_t(k)].data(), bufs[size_t(k)].size(),
                                       DataType::kInt32, ReduceOp::kSum));
    }
    ASSERT_TRUE(works.back()->wait().isOk());
    for (int k = 0; k < kQueued; ++k) {
      EXPECT_TRUE(works[size_t(k)]->isCompleted()) << "collective " << k;
      EXPECT_TRUE(works[size_t(k)]->wait().isOk()) << "collective " << k;
      for (int32_t v : bufs[size_t(k)]) ASSERT_EQ(v, sumOver(n, k)) << "collective " << k;
    }
  });
  for (const Counters& c : g.counters()) EXPECT_EQ(c.collectives, uint64_t(kQueued));
}

// Works waited for from other threads than the one that enqueued them, in reverse order, while the
// progress thread competes for the same queue.
TEST_P(CommunicatorRunner, WaitsFromOtherThreadsInAnyOrder) {
  const int n = GetParam();
  testing::LoopbackGroup g(n, Options{});
  g.run([&](int rank, Communicator& c) {
    std::vector<std::vector<int32_t>> bufs(kQueued);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kQueued; ++k) {
      bufs[size_t(k)].assign(size_t(3 + 2 * k), input(rank, k));
      works.push_back(c.allreduceAsync(bufs[size_t(k)].data(), bufs[size_t(k)].data(), bufs[size_t(k)].size(),
                                       DataType::kInt32, ReduceOp::kSum));
    }
    std::vector<std::thread> waiters;
    for (int k = kQueued - 1; k >= 0; --k) {
      waiters.emplace_back([&, k] { EXPECT_TRUE(works[size_t(k)]->wait().isOk()) << "collective " << k; });
    }
    for (std::thread& t : waiters) t.join();
    for (int k = 0; k < kQueued; ++k) {
      for (int32_t v : bufs[size_t(k)]) ASSERT_EQ(v, sumOver(n, k)) << "collective " << k;
    }
  });
}

// A rank whose caller never waits still takes part: its progress thread runs the queue while the other
// ranks' callers run theirs.
TEST_P(CommunicatorRunner, ProgressThreadRunsWhatNoOneWaitsFor) {
  const int n = GetParam();
  testing::LoopbackGroup g(n, Options{});
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> buf(7, input(rank, 1));
    std::shared_ptr<Work> w =
        c.allreduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32, ReduceOp::kSum);
    if (rank == 0) {
      while (!w->isCompleted()) std::this_thread::yield();  // never calls wait() before it is done
    }
    ASSERT_TRUE(w->wait().isOk());
    for (int32_t v : buf) ASSERT_EQ(v, sumOver(n, 1));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommunicatorRunner, ::testing::Values(1, 2, 3, 5));

}  // namespace
}  // namespace ringguard
