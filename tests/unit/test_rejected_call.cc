// Communicator::rejectedAsync: a call one rank rejected before it reached the communicator (the c10d
// backend's own argument checks) takes that collective's place, so the ranks that entered the collective
// fail at once with a mismatch naming the rejected call instead of waiting out their timeout; when every
// rank rejected the call nothing else happens and the communicator stays usable.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "loopback_util.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;
using testing::quietOptions;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Case {
  int ranks;
  size_t count;  // the entering ranks' count: small ones travel in one round, large ones in the pipeline
};

class RejectedCall : public ::testing::TestWithParam<Case> {};

// Rank 1 rejects its reduce-scatter; the others enter it. Every rank fails it with the same mismatch,
// long before the timeout, naming rank 1's rejected call; every communicator is poisoned.
TEST_P(RejectedCall, PeersThatEnteredTheCollectiveFailAtOnceNamingIt) {
  const Case c = GetParam();
  LoopbackGroup g(c.ranks, quietOptions());
  std::vector<Status> got(size_t(c.ranks));
  const auto start = std::chrono::steady_clock::now();
  g.run([&](int rank, Communicator& comm) {
    if (rank == 1) {
      got[1] = comm.rejectedAsync(CollectiveKind::kReduceScatter)->wait();
      return;
    }
    std::vector<float> in(c.count * size_t(c.ranks), 1.0f), out(c.count, 0.0f);
    got[size_t(rank)] =
        comm.reduceScatter(in.data(), out.data(), c.count, DataType::kFloat32, ReduceOp::kSum);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < c.ranks; ++r) {
    const Status& st = got[size_t(r)];
    EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << "rank " << r << ": " << st.toString();
    EXPECT_EQ(st.message(), got[0].message()) << "rank " << r;
    EXPECT_TRUE(contains(st.message(),
                         "rank 1 has {reduce_scatter op=sum dtype=u8 count=0 seq=0 "
                         "invalid-arguments} (rank 1 rejected the arguments of its call"))
        << st.message();
    EXPECT_EQ(g.comm(r).firstError().toString(), st.toString()) << "rank " << r;
    EXPECT_EQ(g.comm(r).counters().collectives, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RejectedCall,
                         ::testing::Values(Case{2, 3}, Case{2, 5000}, Case{3, 3}, Case{3, 5000}, Case{5, 7}),
                         [](const auto& info) {
                           return "np" + std::to_string(info.param.ranks) + "_count" +
                                  std::to_string(info.param.count);
                         });

// Every rank rejected the same call (a binding refusing a dtype everywhere, say): they agree, the
// communicator stays usable, and the next collective is exact.
TEST(RejectedCallTest, RejectedOnEveryRankLeavesTheCommunicatorUsable) {
  for (int n : {1, 2, 4}) {
    LoopbackGroup g(n, quietOptions());
    g.run([&](int rank, Communicator& comm) {
      Status st = comm.rejectedAsync(CollectiveKind::kAllgather)->wait();
      EXPECT_TRUE(st.isOk()) << "rank " << rank << ": " << st.toString();
      std::vector<int32_t> in(100, rank + 1), out(100, 0);
      st = comm.allreduce(in.data(), out.data(), 100, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(st.isOk()) << "rank " << rank << ": " << st.toString();
      EXPECT_EQ(out, std::vector<int32_t>(100, n * (n + 1) / 2));
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(g.comm(r).firstError().isOk());
      EXPECT_EQ(g.comm(r).counters().collectives, 1u) << "a rejected call is not a collective";
    }
  }
}

}  // namespace
}  // namespace ringguard
