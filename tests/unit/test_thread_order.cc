// Threads and collective order (docs/RELIABILITY.md, defect 8): two threads per rank issue same-shape
// allreduces in a different order on each rank. Without issue lanes nothing can tell (each rank's k-th
// collective matches the other's k-th), so the threads get each other's results: the documented limit,
// asserted here so that it stays documented. With an issue lane per thread the fingerprints differ, and
// every rank fails with kFingerprintMismatch naming both lanes before any payload moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loopback_util.h"
#include "ringguard/core/issue_lane.h"
#include "runtime/peer_lanes.h"
#include "transport/loopback/loopback_transport.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;
using testing::runRanks;

constexpr size_t kCount = 5;
constexpr int32_t kUntouched = -7;

Options orderOptions() {
  Options o;
  o.sliceBytes = 64;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// Thread t's input on rank r: distinct for every (thread, rank), so a sum says which inputs met.
std::vector<int32_t> inputOf(int thread, int rank) {
  std::vector<int32_t> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = int32_t((thread + 1) * 100 + rank * 10 + int(i));
  return v;
}

std::vector<int32_t> sumOf(int threadOnRank0, int threadOnRank1) {
  std::vector<int32_t> a = inputOf(threadOnRank0, 0), b = inputOf(threadOnRank1, 1);
  for (size_t i = 0; i < kCount; ++i) a[i] += b[i];
  return a;
}

struct ThreadResult {
  Status status;
  std::vector<int32_t> out = std::vector<int32_t>(kCount, kUntouched);
};

// On each of two ranks, threads 0 and 1 each issue one allreduce of kCount int32 (thread t in lane
// lanes[t] when given). Rank 0 issues thread 0's first, rank 1 thread 1's: the second thread enqueues only
// after the first one's call returned. results[rank][thread].
std::vector<std::vector<ThreadResult>> issueInOppositeOrders(LoopbackGroup& g,
                                                             const std::vector<std::string>& lanes) {
  std::vector<std::vector<ThreadResult>> results(2, std::vector<ThreadResult>(2));
  g.run([&](int rank, Communicator& c) {
    std::promise<void> firstIssued;
    std::shared_future<void> issued = firstIssued.get_future().share();
    const int first = rank;  // the thread that issues first on this rank
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        std::unique_ptr<IssueLane> lane;
        if (!lanes.empty()) lane = std::make_unique<IssueLane>(lanes[size_t(t)]);
        if (t != first) issued.wait();
        const std::vector<int32_t> in = inputOf(t, rank);
        ThreadResult& r = results[size_t(rank)][size_t(t)];
        std::shared_ptr<Work> w =
            c.allreduceAsync(in.data(), r.out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
        if (t == first) firstIssued.set_value();
        r.status = w->wait();
      });
    }
    for (std::thread& th : threads) th.join();
  });
  return results;
}

TEST(ThreadOrder, WithoutLanesTwoThreadsInOppositeOrdersGetEachOthersResults) {
  LoopbackGroup g(2, orderOptions());
  const auto results = issueInOppositeOrders(g, {});
  // Collective 0 is rank 0's thread 0 with rank 1's thread 1; collective 1 the other two. Every check
  // passes: that is the limit no verifier can see.
  for (int rank = 0; rank < 2; ++rank) {
    for (int t = 0; t < 2; ++t) {
      const ThreadResult& r = results[size_t(rank)][size_t(t)];
      ASSERT_TRUE(r.status.isOk()) << "rank " << rank << " thread " << t << ": " << r.status.toString();
      // Thread t's partner on the other rank is the other thread.
      const std::vector<int32_t> want = rank == 0 ? sumOf(t, 1 - t) : sumOf(1 - t, t);
      EXPECT_EQ(r.out, want) << "rank " << rank << " thread " << t;
      EXPECT_NE(r.out, sumOf(t, t)) << "the result the thread meant";
    }
  }
  for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(g.comm(rank).firstError().isOk());
}

TEST(ThreadOrder, WithALanePerThreadTheSwapIsAFingerprintMismatchOnEveryRank) {
  LoopbackGroup g(2, orderOptions());
  const auto results = issueInOppositeOrders(g, {"order-prefetch", "order-compute"});
  // Collective 0: rank 0 has thread 0's (prefetch), rank 1 thread 1's (compute), each the lane's first.
  const std::string mismatch =
      "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=i32 count=5 seq=0 lane "
      "'order-prefetch' #0}, rank 1 has {allreduce op=sum dtype=i32 count=5 seq=0 lane 'order-compute' #0} "
      "(the same collective from different issue lanes: threads issued same-shape collectives in a "
      "different order on these ranks)";
  for (int rank = 0; rank < 2; ++rank) {
    for (int t = 0; t < 2; ++t) {
      const ThreadResult& r = results[size_t(rank)][size_t(t)];
      // The first collective fails in the exchange; the second finds the communicator poisoned with it.
      EXPECT_EQ(r.status.code(), StatusCode::kFingerprintMismatch) << "rank " << rank << " thread " << t;
      EXPECT_EQ(r.status.message(), mismatch) << "rank " << rank << " thread " << t;
      EXPECT_EQ(r.out, std::vector<int32_t>(kCount, kUntouched)) << "no payload moved";
    }
    // A fingerprint mismatch poisons the communicator (protocol.md, "Errors, timeouts, poisoning"): every
    // later call fails with it, at once.
    Communicator& c = g.comm(rank);
    ASSERT_EQ(c.firstError().code(), StatusCode::kFingerprintMismatch);  // else the next call waits alone
    EXPECT_EQ(c.firstError().message(), mismatch);
    std::vector<int32_t> in = inputOf(0, rank), out(kCount);
    const Status later = c.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(later.code(), StatusCode::kFingerprintMismatch);
    EXPECT_EQ(later.message(), mismatch);
  }
}

// Lanes change nothing for a program that issues in one order: each lane numbers its own collectives.
TEST(ThreadOrder, LanesInTheSameOrderOnEveryRankGiveExactResults) {
  LoopbackGroup g(2, orderOptions());
  g.run([&](int rank, Communicator& c) {
    for (int round = 0; round < 3; ++round) {
      for (int t = 0; t < 2; ++t) {
        IssueLane lane(t == 0 ? "order-prefetch" : "order-compute");
        const std::vector<int32_t> in = inputOf(t, rank);
        std::vector<int32_t> out(kCount);
        const Status st = c.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
        ASSERT_TRUE(st.isOk()) << st.toString();
        EXPECT_EQ(out, sumOf(t, t)) << "rank " << rank << " round " << round << " thread " << t;
      }
    }
    // Outside every lane: still matched by issue order alone.
    const std::vector<int32_t> in = inputOf(0, rank);
    std::vector<int32_t> out(kCount);
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
    EXPECT_EQ(out, sumOf(0, 0));
  });
}

// The lane is read on the thread that issues, not where the collective runs: a lane each rank's thread
// enters in the same order, but one rank's collective is issued outside it, is a mismatch (lane against
// none), although the progress thread is in no lane on either rank.
TEST(ThreadOrder, TheLaneIsTheIssuingThreads) {
  LoopbackGroup g(2, orderOptions());
  std::vector<Status> got(2);
  g.run([&](int rank, Communicator& c) {
    const std::vector<int32_t> in = inputOf(0, rank);
    std::vector<int32_t> out(kCount);
    std::unique_ptr<IssueLane> lane;
    if (rank == 1) lane = std::make_unique<IssueLane>("order-prefetch");
    got[size_t(rank)] =
        c.allreduceAsync(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum)->wait();
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(got[size_t(rank)].code(), StatusCode::kFingerprintMismatch);
    EXPECT_EQ(
        got[size_t(rank)].message(),
        "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=i32 count=5 seq=0}, rank 1 "
        "has {allreduce op=sum dtype=i32 count=5 seq=0 lane 'order-prefetch' #0} (the same collective "
        "from different issue lanes: threads issued same-shape collectives in a different order on "
        "these ranks)");
  }
}

// Rank 0 sent `message` ("{sendrecv ... seq=0") in lane order-prefetch, rank 1 received it in order-compute:
// the receiver's kInvalidArgument naming both, and the sender's kPeerError carrying it.
void expectMismatchOnBothEnds(const std::vector<Status>& got, const std::string& message) {
  const std::string mismatch = "sendrecv mismatch: rank 0 sends " + message +
                               " lane 'order-prefetch'}, rank 1 expects " + message +
                               " lane 'order-compute'}";
  EXPECT_EQ(got[1].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got[1].message(), mismatch);
  EXPECT_EQ(got[0].code(), StatusCode::kPeerError) << got[0].toString();
  EXPECT_NE(got[0].message().find(mismatch), std::string::npos) << got[0].message();
}

// Point-to-point carries the lane too: a message sent from one lane and received in another is the
// receiver's kInvalidArgument naming both (as any send/recv mismatch), and the sender's kPeerError.
TEST(ThreadOrder, SendRecvAcrossLanesIsAMismatchOnBothEnds) {
  LoopbackGroup g(2, orderOptions());
  std::vector<Status> got(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> buf(kCount, rank);
    IssueLane lane(rank == 0 ? "order-prefetch" : "order-compute");
    got[size_t(rank)] = rank == 0 ? c.sendRecv(buf.data(), kCount, 1, nullptr, 0, -1, DataType::kInt32)
                                  : c.sendRecv(nullptr, 0, -1, buf.data(), kCount, 0, DataType::kInt32);
  });
  expectMismatchOnBothEnds(got, "{sendrecv dtype=i32 count=5 tag=0 seq=0");
}

// The c10d backend's send / recv (PeerLanes) read the lane in send() / recv(), on the issuing thread.
TEST(ThreadOrder, PeerLanesCarryTheIssuingThreadsLane) {
  std::vector<std::unique_ptr<PeerLanes>> lanes;
  for (auto& t : makeLoopbackTransports(2))
    lanes.push_back(std::make_unique<PeerLanes>(std::move(t), orderOptions()));
  std::vector<Status> got(2);
  runRanks(2, [&](int rank) {
    std::vector<uint8_t> buf(16, uint8_t(rank));
    std::promise<Status> done;
    IssueLane lane(rank == 0 ? "order-prefetch" : "order-compute");
    auto finish = [&done](const Status& st) { done.set_value(st); };
    if (rank == 0) {
      lanes[0]->send(1, 3, buf.data(), buf.size(), DataType::kUint8, finish);
    } else {
      lanes[1]->recv(0, 3, buf.data(), buf.size(), DataType::kUint8, finish);
    }
    got[size_t(rank)] = done.get_future().get();
  });
  expectMismatchOnBothEnds(got, "{sendrecv dtype=u8 count=16 tag=3 seq=0");
}

}  // namespace
}  // namespace ringguard
