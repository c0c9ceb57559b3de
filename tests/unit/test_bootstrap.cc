// The Bootstrap helpers and the host factory over an in-memory bootstrap (memory_bootstrap.h).
#include <gtest/gtest.h>

#include "loopback_util.h"
#include "memory_bootstrap.h"
#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/runtime/factories.h"

namespace ringguard {
namespace {

using testing::Board;
using testing::MemoryBootstrap;

TEST(Bootstrap, NodeLocalRankOnOneHostIsTheRank) {
  for (int n : {1, 3}) {
    Board board(n);
    testing::runRanks(n, [&](int rank) {
      MemoryBootstrap b(&board, rank);
      int local = -1, localSize = -1;
      ASSERT_TRUE(nodeLocalRank(b, &local, &localSize).isOk());
      EXPECT_EQ(local, rank);
      EXPECT_EQ(localSize, n);
    });
  }
}

TEST(Factories, HostCommunicatorFromABootstrapReduces) {
  const int n = 3;
  Board board(n);
  std::vector<std::unique_ptr<Communicator>> comms(n);
  testing::runRanks(n, [&](int rank) {
    MemoryBootstrap b(&board, rank);
    ASSERT_TRUE(createHostCommunicator(b, Options(), &comms[size_t(rank)]).isOk());
  });
  testing::runRanks(n, [&](int rank) {
    Communicator& c = *comms[size_t(rank)];
    EXPECT_EQ(c.rank(), rank);
    EXPECT_EQ(c.size(), n);
    std::vector<float> v(1000, float(rank + 1));
    ASSERT_TRUE(c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).isOk());
    for (float x : v) ASSERT_EQ(x, 6.0f);
  });
}

TEST(Factories, HostCommunicatorRejectsBadOptions) {
  Board board(1);
  MemoryBootstrap b(&board, 0);
  Options o;
  o.slots = 1;
  std::unique_ptr<Communicator> c;
  EXPECT_EQ(createHostCommunicator(b, o, &c).code(), StatusCode::kInvalidArgument);
}

// A fault-schedule entry for a rank the group does not have could never fire: an error at creation.
TEST(Factories, HostCommunicatorRejectsAScheduleThatCannotFire) {
  Board board(1);
  MemoryBootstrap b(&board, 0);
  Options o;
  o.fault.schedule = {{0, 0, 0, 1}};
  std::unique_ptr<Communicator> c;
  Status st = createHostCommunicator(b, o, &c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 1 does not exist"), std::string::npos) << st.message();
  EXPECT_EQ(c, nullptr);
}

}  // namespace
}  // namespace ringguard
