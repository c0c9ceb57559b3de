// The staged chunked allreduce (ringguard/runtime/staged_allreduce.h) on device memory, under mpirun: the
// ranks share the one GPU, its chunks go device -> pinned host -> the MPI host communicator's allreduce ->
// device. Its result must equal the device communicator's ring allreduce bit for bit (and the closed form:
// small integer inputs, exact whatever the order), for every dtype and op, counts {0, 1, odd, not a
// multiple of the chunk, many chunks}, in and out of place; with faults injected into the host allreduces,
// every one is detected and repaired.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ringguard/runtime/staged_allreduce.h"
#include "staged_fixture.h"

namespace ringguard {
namespace {

using Fixture = testing::StagedFixture;
using testing::expectedResult;
using testing::makeInput;

// The staged allreduce against the ring on the same inputs, and both against the closed form.
void compareWithRing(Fixture& f, DataType t, ReduceOp op, size_t count, size_t chunkBytes, bool inPlace) {
  const int n = f.host->size(), me = f.host->rank();
  const size_t bytes = count * dataTypeSize(t);
  const std::string where = std::string(dataTypeName(t)) + " " + reduceOpName(op) +
                            " count=" + std::to_string(count) + " chunk=" + std::to_string(chunkBytes) +
                            (inPlace ? " in place" : "");
  const std::vector<uint8_t> input = makeInput(t, op, me, count);
  std::vector<uint8_t> expected = expectedResult(t, op, n, count);
  void* in = f.mem.make(bytes, input);
  void* ringOut = f.mem.make(bytes, {});
  void* stagedOut = f.mem.make(bytes, inPlace ? input : std::vector<uint8_t>{});
  const void* send = inPlace ? stagedOut : in;
  Status st = f.device->allreduceAsync(in, ringOut, count, t, op, f.mem.stream())->wait();
  ASSERT_TRUE(st.isOk()) << "ring " << where << ": " << st.toString();
  StagedStats stats;
  st = stagedAllreduce(*f.host, *f.stager, send, stagedOut, count, t, op, chunkBytes, &stats);
  ASSERT_TRUE(st.isOk()) << "staged " << where << ": " << st.toString();
  testing::expectSameAsRing(f, ringOut, stagedOut, expected, stats, t, count, chunkBytes, where);
  if (!inPlace) {
    EXPECT_EQ(f.mem.read(in, bytes), input) << where << ": modified the input";
  }
  f.mem.releaseAll();
}

TEST(DeviceStagedAllreduce, BitIdenticalToTheRing) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  Options o;
  o.sliceBytes = 4096;
  Fixture f;
  testing::makeStagedFixture(o, &f);
  for (DataType t : kAllDataTypes) {
    if (isFloat8Type(t)) continue;  // copy-only: no allreduce
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(100003)}) {
      compareWithRing(f, t, ReduceOp::kSum, count, 4096, false);
      if (count % 2 == 1) compareWithRing(f, t, ReduceOp::kSum, count, 4096, true);
    }
    for (ReduceOp op : kAllReduceOps) {
      if (op != ReduceOp::kSum && reduceSupported(t, op))
        compareWithRing(f, t, op, 3001, 4096, op == ReduceOp::kMax);
    }
  }
  ReduceOp half = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kComplex64, DataType::kComplex128}) {
    compareWithRing(f, t, half, 3001, 4096, false);
  }
  compareWithRing(f, DataType::kFloat32, ReduceOp::kSum, (8u << 20) + 3, 1u << 20,
                  false);  // 32 MiB, 1 MiB chunks
  compareWithRing(f, DataType::kBFloat16, ReduceOp::kAvg, (8u << 20) + 3, 1u << 20, true);
  EXPECT_EQ(f.host->counters().detected, 0u);
  EXPECT_EQ(f.device->counters().detected, 0u);
}

TEST(DeviceStagedAllreduce, FaultsInTheHostAllreducesDetectedAndRepaired) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  testing::underHostFaults([](Fixture& f) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64})
      compareWithRing(f, t, ReduceOp::kSum, 300007, 64 << 10, false);
  });
}

}  // namespace
}  // namespace ringguard
