// Who runs a queued host collective: the progress thread, or the caller of a synchronous form waiting for
// it (Communicator::helpWhileWaiting). Either way one runner at a time, in queue order.
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

// Eleven Async collectives queued, then a synchronous one: it runs behind them in order (a different order
// would mismatch fingerprints across ranks), on whichever runner holds the transport, and every Work is
// complete with its own result.
TEST_P(CommunicatorRunner, ASynchronousCallRunsBehindTheQueueInOrder) {
  const int n = GetParam();
  testing::LoopbackGroup g(n, Options{});
  g.run([&](int rank, Communicator& c) {
    std::vector<std::vector<int32_t>> bufs(kQueued);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kQueued; ++k) bufs[size_t(k)].assign(size_t(5 + k), input(rank, k));
    for (int k = 0; k + 1 < kQueued; ++k) {
      works.push_back(c.allreduceAsync(bufs[size_t(k)].data(), bufs[size_t(k)].data(), bufs[size_t(k)].size(),
                                       DataType::kInt32, ReduceOp::kSum));
    }
    std::vector<int32_t>& last = bufs.back();
    ASSERT_TRUE(c.allreduce(last.data(), last.data(), last.size(), DataType::kInt32, ReduceOp::kSum).isOk());
    for (int k = 0; k + 1 < kQueued; ++k) {
      EXPECT_TRUE(works[size_t(k)]->isCompleted()) << "collective " << k;
      EXPECT_TRUE(works[size_t(k)]->wait().isOk()) << "collective " << k;
    }
    for (int k = 0; k < kQueued; ++k) {
      for (int32_t v : bufs[size_t(k)]) ASSERT_EQ(v, sumOver(n, k)) << "collective " << k;
    }
  });
  for (const Counters& c : g.counters()) EXPECT_EQ(c.collectives, uint64_t(kQueued));
}

// Synchronous forms back to back, every collective kind: each runs on its caller (the progress thread is
// never woken for them) and gives its exact result.
TEST_P(CommunicatorRunner, SynchronousFormsOfEveryCollective) {
  const int n = GetParam();
  testing::LoopbackGroup g(n, Options{});
  g.run([&](int rank, Communicator& c) {
    for (int k = 0; k < 20; ++k) {
      std::vector<int32_t> a(7, input(rank, k));
      ASSERT_TRUE(c.allreduce(a.data(), a.data(), a.size(), DataType::kInt32, ReduceOp::kSum).isOk());
      for (int32_t v : a) ASSERT_EQ(v, sumOver(n, k));
      std::vector<int32_t> blocks(static_cast<size_t>(3 * n), input(rank, k)), mine(3);
      ASSERT_TRUE(c.reduceScatter(blocks.data(), mine.data(), 3, DataType::kInt32, ReduceOp::kSum).isOk());
      for (int32_t v : mine) ASSERT_EQ(v, sumOver(n, k));
      std::vector<int32_t> one(2, rank + k), all(static_cast<size_t>(2 * n));
      ASSERT_TRUE(c.allgather(one.data(), all.data(), 2, DataType::kInt32).isOk());
      for (int p = 0; p < n; ++p) ASSERT_EQ(all[size_t(2 * p)], p + k);
      std::vector<int32_t> b(4, rank == 0 ? k : -1);
      ASSERT_TRUE(c.broadcast(b.data(), b.data(), 4, DataType::kInt32, 0).isOk());
      for (int32_t v : b) ASSERT_EQ(v, k);
      std::vector<int32_t> to(static_cast<size_t>(n)), from(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) to[size_t(p)] = 100 * rank + p;
      ASSERT_TRUE(c.alltoall(to.data(), from.data(), 1, DataType::kInt32).isOk());
      for (int p = 0; p < n; ++p) ASSERT_EQ(from[size_t(p)], 100 * p + rank);
      if (n > 1) {
        int32_t out = rank + k, in = -1;
        ASSERT_TRUE(c.sendRecv(&out, 1, (rank + 1) % n, &in, 1, (rank + n - 1) % n, DataType::kInt32).isOk());
        ASSERT_EQ(in, (rank + n - 1) % n + k);
      }
    }
  });
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
