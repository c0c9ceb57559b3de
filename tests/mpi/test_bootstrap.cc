// The MPI bootstrap: its exchanges (sizes that differ by rank, a root other than 0), node-local ranks under
// one mpirun on one host, and a host communicator built from it by the runtime's factory.
#include <gtest/gtest.h>

#include <vector>

#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/runtime/factories.h"
#include "test_util.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::makeInput;
using testing::worldRank;
using testing::worldSize;

std::unique_ptr<Bootstrap> worldBootstrap() {
  std::unique_ptr<Bootstrap> b;
  Status st = mpi::createBootstrap(&b);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return b;
}

TEST(MpiBootstrap, BroadcastTakesTheRootsBytesWhateverTheOthersHeld) {
  auto b = worldBootstrap();
  ASSERT_EQ(b->rank(), worldRank());
  ASSERT_EQ(b->size(), worldSize());
  const int root = worldSize() - 1;
  std::vector<uint8_t> bytes(size_t(worldRank()), 7);  // every rank a different size
  if (worldRank() == root) bytes = {1, 2, 3, 4, 5};
  ASSERT_TRUE(b->broadcast(root, &bytes).isOk());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  std::vector<uint8_t> none;
  ASSERT_TRUE(b->broadcast(0, &none).isOk());
  EXPECT_TRUE(none.empty());
}

TEST(MpiBootstrap, AllgatherKeepsEachRanksLengthInRankOrder) {
  auto b = worldBootstrap();
  std::vector<std::vector<uint8_t>> all;
  ASSERT_TRUE(b->allgather(std::vector<uint8_t>(size_t(worldRank()), uint8_t(worldRank())), &all).isOk());
  ASSERT_EQ(int(all.size()), worldSize());
  for (int r = 0; r < worldSize(); ++r)
    EXPECT_EQ(all[size_t(r)], std::vector<uint8_t>(size_t(r), uint8_t(r)));
}

TEST(MpiBootstrap, OneHostMakesNodeLocalRanksTheWorldRanks) {
  auto b = worldBootstrap();
  int local = -1, localSize = -1;
  ASSERT_TRUE(nodeLocalRank(*b, &local, &localSize).isOk());
  EXPECT_EQ(local, worldRank());
  EXPECT_EQ(localSize, worldSize());
}

TEST(MpiBootstrap, HostFactoryBuildsAWorkingCommunicator) {
  auto b = worldBootstrap();
  std::unique_ptr<Communicator> comm;
  ASSERT_TRUE(createHostCommunicator(*b, Options(), &comm).isOk());
  b.reset();  // the communicator does not need its bootstrap any more
  EXPECT_STREQ(comm->transportName(), "mpi");
  const size_t count = 1001;
  std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, worldRank(), count), out(in.size());
  ASSERT_TRUE(comm->allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
  EXPECT_EQ(out, expectedResult(DataType::kFloat32, ReduceOp::kSum, worldSize(), count));
}

}  // namespace
}  // namespace ringguard
