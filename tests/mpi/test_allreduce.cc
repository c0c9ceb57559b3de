// The full dtype x op x count matrix of the verified ring AllReduce, fault-free, run inside one mpirun.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "test_util.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::makeComm;
using testing::makeInput;
using testing::smoke;
using testing::worldRank;
using testing::worldSize;

std::vector<size_t> counts(int n) {
  // 0, 1, fewer than N, N, not divisible by N, several slices, and uneven last slices.
  std::vector<size_t> c = {0, 1, size_t(n) - 1, size_t(n), size_t(n) + 1, 7, 64, 1000, 4099, 100003};
  if (smoke()) c = {0, 1, size_t(n) + 1, 4099};
  return c;
}

void runMatrix(size_t sliceBytes) {
  Options options;
  options.sliceBytes = sliceBytes;
  options.timeout = std::chrono::milliseconds(60000);
  auto comm = makeComm(options);
  const int me = worldRank(), n = worldSize();
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(t, op)) continue;  // refused: tests/unit/test_loopback_allreduce.cc
      for (size_t count : counts(n)) {
        for (bool inPlace : {false, true}) {
          SCOPED_TRACE(std::string(dataTypeName(t)) + " " + reduceOpName(op) +
                       " count=" + std::to_string(count) + (inPlace ? " in-place" : " out-of-place") +
                       " slice=" + std::to_string(sliceBytes));
          std::vector<uint8_t> in = makeInput(t, op, me, count);
          std::vector<uint8_t> out(in.size(), 0xAB);
          Status st = inPlace ? comm->allreduce(in.data(), in.data(), count, t, op)
                              : comm->allreduce(in.data(), out.data(), count, t, op);
          ASSERT_TRUE(st.isOk()) << st.toString();
          const std::vector<uint8_t>& got = inPlace ? in : out;
          std::vector<uint8_t> want = expectedResult(t, op, n, count);
          ASSERT_EQ(got.size(), want.size());
          ASSERT_TRUE(got == want) << "result differs from the closed form";
          if (!inPlace)
            ASSERT_TRUE(in == makeInput(t, op, me, count)) << "out-of-place call modified its input";
        }
      }
    }
  }
  Counters c = comm->counters();
  EXPECT_EQ(c.detected, 0u);
  EXPECT_EQ(c.injected, 0u);
  EXPECT_EQ(c.escaped, 0u);
  if (n > 1) EXPECT_GT(c.slicesVerified, 0u);
}

// Small slices: many slices per column, pipelining and both receive slots in play.
TEST(AllreduceMatrix, SmallSlices) { runMatrix(64); }
// Default slice size: mostly one slice per column.
TEST(AllreduceMatrix, DefaultSlices) { runMatrix(Options().sliceBytes); }

TEST(Allreduce, DefaultSliceSizeIsTheTransports) {
  EXPECT_EQ(Options().sliceBytes, 0u);
  auto comm = makeComm(Options());
  EXPECT_EQ(comm->options().sliceBytes, size_t(1) << 20) << "the MPI transport's default";
  Options explicitSize;
  explicitSize.sliceBytes = 4096;
  EXPECT_EQ(makeComm(explicitSize)->options().sliceBytes, 4096u);
}

TEST(Allreduce, DefaultSlotCountIsTheTransports) {
  EXPECT_EQ(Options().slots, 0);
  EXPECT_EQ(makeComm(Options())->options().slots, 2) << "the MPI transport's default: double buffering";
  Options explicitSlots;
  explicitSlots.slots = 5;
  EXPECT_EQ(makeComm(explicitSlots)->options().slots, 5);
}

TEST(Allreduce, LargeBufferManySlices) {
  Options options;
  options.sliceBytes = 64 * 1024;
  options.slots = 3;
  auto comm = makeComm(options);
  const size_t count = (size_t(4) << 20) + 3;  // 16 MiB of f32 plus a ragged tail
  std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, worldRank(), count);
  ASSERT_TRUE(comm->allreduce(in.data(), in.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
  EXPECT_TRUE(in == expectedResult(DataType::kFloat32, ReduceOp::kSum, worldSize(), count));
}

TEST(Allreduce, AsyncCallsRunInEnqueueOrder) {
  auto comm = makeComm(Options());
  const int n = worldSize();
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 8; ++k)
    bufs.push_back(makeInput(DataType::kInt32, ReduceOp::kSum, worldRank(), 1000 + k));
  for (int k = 0; k < 8; ++k) {
    works.push_back(
        comm->allreduceAsync(bufs[k].data(), bufs[k].data(), 1000 + k, DataType::kInt32, ReduceOp::kSum));
  }
  for (int k = 0; k < 8; ++k) {
    ASSERT_TRUE(works[k]->wait().isOk());
    EXPECT_TRUE(bufs[k] == expectedResult(DataType::kInt32, ReduceOp::kSum, n, 1000 + k));
  }
  EXPECT_EQ(comm->counters().collectives, 8u);
}

}  // namespace
}  // namespace ringguard
