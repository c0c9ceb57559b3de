// A synchronous call runs on its caller at once when the communicator is idle (src/runtime/caller_run.cc),
// with every guarantee of the queue kept: the one order of a communicator's collectives across the threads
// that issue them, abort() from another thread, the timeout naming the peer. Rank 0's first fingerprint
// frame of a collective (seen by the loopback fabric's control hook) says that its runner is inside it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loopback_util.h"
#include "transport/loopback/loopback_transport.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;
using testing::runRanks;

// Rank r's input of collective k: every element is 1000 * k + r + 1, so the sum over n ranks is
// n * 1000 * k + n * (n + 1) / 2 whatever the order.
int32_t input(int rank, int k) { return 1000 * k + rank + 1; }
int32_t sumOver(int n, int k) { return n * 1000 * k + n * (n + 1) / 2; }

Options quiet(std::chrono::milliseconds timeout) {
  Options o = testing::quietOptions();
  o.timeout = timeout;
  return o;
}

// Two ranks over a loopback fabric whose control hook counts the fingerprint frames rank 0 sends.
struct WatchedPair {
  explicit WatchedPair(const Options& o) {
    std::vector<std::unique_ptr<Transport>> transports = makeLoopbackTransports(2, &fabric);
    fabric->setControlHook([this](int from, int, ControlTag tag, std::vector<uint8_t>*) {
      if (from == 0 && tag == ControlTag::kFingerprint) rank0Fingerprints.fetch_add(1);
      return true;
    });
    for (auto& t : transports) comms.push_back(makeCommunicator(std::move(t), o));
  }
  // Both ranks' first collective: the handshakes are over, so rank 0's next synchronous call runs on its
  // caller. Returns how many fingerprints rank 0 had sent by then.
  int warmUp(int rank) {
    std::vector<int32_t> v(3, input(rank, 0));
    EXPECT_TRUE(comms[size_t(rank)]
                    ->allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum)
                    .isOk());
    return rank0Fingerprints.load();
  }
  // Spins until rank 0 sent a fingerprint after `before`: its collective holds the runner.
  void awaitRank0Running(int before) {
    while (rank0Fingerprints.load() <= before) std::this_thread::yield();
  }

  std::shared_ptr<LoopbackFabric> fabric;
  std::atomic<int> rank0Fingerprints{0};
  std::vector<std::unique_ptr<Communicator>> comms;
};

// Rank 0's synchronous allreduce runs on its caller and waits for rank 1; meanwhile another thread of rank 0
// issues an Async allreduce. It must queue behind the running one (not overtake it, not run beside it):
// rank 1 issues the same two in the same order only once rank 0's second was issued, so both ranks' results
// are exact only if rank 0 ran them in issue order.
TEST(CallerRun, AnAsyncCallIssuedDuringADirectRunQueuesBehindIt) {
  WatchedPair p(quiet(std::chrono::milliseconds(20000)));
  std::atomic<bool> secondIssued{false};
  runRanks(2, [&](int rank) {
    Communicator& c = *p.comms[size_t(rank)];
    const int before = p.warmUp(rank);
    std::vector<int32_t> first(7, input(rank, 1)), second(9, input(rank, 2));
    if (rank == 0) {
      std::shared_ptr<Work> later;
      std::thread issuer([&] {
        p.awaitRank0Running(before);
        later =
            c.allreduceAsync(second.data(), second.data(), second.size(), DataType::kInt32, ReduceOp::kSum);
        secondIssued.store(true);
      });
      EXPECT_TRUE(
          c.allreduce(first.data(), first.data(), first.size(), DataType::kInt32, ReduceOp::kSum).isOk());
      issuer.join();
      EXPECT_TRUE(later->wait().isOk());
    } else {
      while (!secondIssued.load()) std::this_thread::yield();
      EXPECT_TRUE(
          c.allreduce(first.data(), first.data(), first.size(), DataType::kInt32, ReduceOp::kSum).isOk());
      EXPECT_TRUE(
          c.allreduce(second.data(), second.data(), second.size(), DataType::kInt32, ReduceOp::kSum).isOk());
    }
    for (int32_t v : first) ASSERT_EQ(v, sumOver(2, 1)) << "rank " << rank;
    for (int32_t v : second) ASSERT_EQ(v, sumOver(2, 2)) << "rank " << rank;
  });
  for (auto& c : p.comms) EXPECT_EQ(c->counters().collectives, 3u);
}

class CallerRunRanks : public ::testing::TestWithParam<int> {};

// One thread issues Async collectives and leaves; another thread's synchronous call then runs behind every
// one of them, whoever runs them, with a different count so that overtaking would mismatch fingerprints.
TEST_P(CallerRunRanks, ASynchronousCallFromAnotherThreadRunsBehindTheQueue) {
  const int n = GetParam();
  constexpr int kQueued = 8;
  LoopbackGroup g(n, quiet(std::chrono::milliseconds(20000)));
  g.run([&](int rank, Communicator& c) {
    std::vector<std::vector<int32_t>> bufs(kQueued + 1);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k <= kQueued; ++k) bufs[size_t(k)].assign(size_t(4 + k), input(rank, k));
    std::thread([&] {
      for (int k = 0; k < kQueued; ++k) {
        works.push_back(c.allreduceAsync(bufs[size_t(k)].data(), bufs[size_t(k)].data(),
                                         bufs[size_t(k)].size(), DataType::kInt32, ReduceOp::kSum));
      }
    }).join();
    std::vector<int32_t>& last = bufs.back();
    std::thread([&] {
      EXPECT_TRUE(
          c.allreduce(last.data(), last.data(), last.size(), DataType::kInt32, ReduceOp::kSum).isOk());
    }).join();
    for (int k = 0; k < kQueued; ++k) EXPECT_TRUE(works[size_t(k)]->wait().isOk()) << "collective " << k;
    for (int k = 0; k <= kQueued; ++k) {
      for (int32_t v : bufs[size_t(k)]) ASSERT_EQ(v, sumOver(n, k)) << "collective " << k;
    }
  });
  for (const Counters& c : g.counters()) EXPECT_EQ(c.collectives, uint64_t(kQueued + 1));
}

// Two threads of each rank take turns on one communicator, synchronous calls and Async calls waited for
// mixed: the runner passes between the callers and the progress thread (what the TSan build checks).
TEST_P(CallerRunRanks, ThreadsTakingTurnsOnOneCommunicator) {
  const int n = GetParam();
  constexpr int kCalls = 16;
  LoopbackGroup g(n, quiet(std::chrono::milliseconds(20000)));
  g.run([&](int rank, Communicator& c) {
    std::atomic<int> turn{0};
    auto take = [&](int thread) {
      for (int k = thread; k < kCalls; k += 2) {
        while (turn.load() != k) std::this_thread::yield();
        std::vector<int32_t> v(size_t(3 + k), input(rank, k));
        const Status st =
            k % 4 < 2
                ? c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum)
                : c.allreduceAsync(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum)->wait();
        EXPECT_TRUE(st.isOk()) << "call " << k << ": " << st.toString();
        for (int32_t x : v) EXPECT_EQ(x, sumOver(n, k)) << "call " << k;
        turn.store(k + 1);
      }
    };
    std::thread other(take, 1);
    take(0);
    other.join();
  });
  for (const Counters& c : g.counters()) EXPECT_EQ(c.collectives, uint64_t(kCalls));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CallerRunRanks, ::testing::Values(2, 3));

// abort() from another thread ends a synchronous call running on its caller (waiting for a peer that never
// comes), at once, with the reason; the communicator stays failed; the peer learns it from the error frame
// instead of its timeout.
TEST(CallerRun, AbortEndsADirectRunAndTellsThePeer) {
  using Clock = std::chrono::steady_clock;
  WatchedPair p(quiet(std::chrono::milliseconds(20000)));
  std::atomic<bool> rank0Done{false};
  runRanks(2, [&](int rank) {
    Communicator& c = *p.comms[size_t(rank)];
    const int before = p.warmUp(rank);
    std::vector<int32_t> v(7, input(rank, 1));
    if (rank == 0) {
      std::thread aborter([&] {
        p.awaitRank0Running(before);
        c.abort("test");
      });
      const auto t0 = Clock::now();
      const Status st = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
      aborter.join();
      EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
      EXPECT_EQ(st.code(), StatusCode::kAborted) << st.toString();
      EXPECT_NE(st.message().find("aborted on rank 0 while waiting for"), std::string::npos) << st.message();
      const Status later = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(later.message(), "rank 0 aborted: test");
      rank0Done.store(true);
    } else {
      while (!rank0Done.load()) std::this_thread::yield();
      const auto t0 = Clock::now();
      const Status st = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
      EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "rank 1 must not wait out its 20 s timeout";
      EXPECT_EQ(st.code(), StatusCode::kPeerError) << st.toString();
      EXPECT_NE(st.message().find("aborted on rank 0"), std::string::npos) << st.message();
    }
  });
  const CommunicatorSummary s = p.comms[0]->summary();
  EXPECT_EQ(s.byKind.at("allreduce").calls, 2u);  // the warm-up and the aborted one; the third never ran
  EXPECT_EQ(s.byKind.at("allreduce").failed, 1u);
}

// A synchronous call on its caller whose peer never comes ends at the timeout naming the peer, and the
// communicator answers every later call with that error.
TEST(CallerRun, ADirectRunTimesOutNamingThePeer) {
  LoopbackGroup g(2, quiet(std::chrono::milliseconds(400)));
  std::vector<int32_t> v(7, input(0, 1));
  Communicator& c = g.comm(0);
  const Status st = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_NE(st.message().find("rank 1 stopped making progress"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("allreduce seq 0"), std::string::npos) << st.message();
  EXPECT_EQ(c.allgather(v.data(), v.data(), 1, DataType::kInt32).toString(), st.toString());
  EXPECT_EQ(c.firstError().toString(), st.toString());
}

}  // namespace
}  // namespace ringguard
