// The staged chunked all-gather (ringguard/runtime/staged_allgather.h) on device memory, under mpirun:
// the ranks share the one GPU, its chunks go device -> pinned host -> the MPI host communicator -> device.
// Its result must equal the device communicator's ring all-gather bit for bit (and the closed form), for
// every dtype, counts {0, 1, odd, not a multiple of the chunk, many chunks}, in and out of place; with
// faults injected into the host all-gathers, every one is detected and repaired.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ringguard/runtime/staged_allgather.h"
#include "staged_fixture.h"

namespace ringguard {
namespace {

using testing::pattern;

using Fixture = testing::StagedFixture;

// The staged all-gather against the ring on the same inputs, and both against the closed form.
void compareWithRing(Fixture& f, DataType t, size_t count, size_t chunkBytes, bool inPlace) {
  const int n = f.host->size(), me = f.host->rank();
  const size_t bytes = count * dataTypeSize(t);
  const std::string where = std::string(dataTypeName(t)) + " count=" + std::to_string(count) +
                            " chunk=" + std::to_string(chunkBytes) + (inPlace ? " in place" : "");
  std::vector<uint8_t> expected;
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> p = pattern(t, r, count);
    expected.insert(expected.end(), p.begin(), p.end());
  }
  std::vector<uint8_t> init(bytes * size_t(n), 0xCD);
  std::copy(expected.begin() + long(bytes) * me, expected.begin() + long(bytes) * (me + 1),
            init.begin() + long(bytes) * me);
  void* in = f.mem.make(bytes, pattern(t, me, count));
  void* ringOut = f.mem.make(bytes * size_t(n), {});
  void* stagedOut = f.mem.make(bytes * size_t(n), inPlace ? init : std::vector<uint8_t>{});
  const void* send = inPlace ? static_cast<const uint8_t*>(stagedOut) + bytes * size_t(me) : in;
  Status st = f.device->allgatherAsync(in, ringOut, count, t, f.mem.stream())->wait();
  ASSERT_TRUE(st.isOk()) << "ring " << where << ": " << st.toString();
  StagedStats stats;
  st = stagedAllgather(*f.host, *f.stager, send, stagedOut, count, t, chunkBytes, &stats);
  ASSERT_TRUE(st.isOk()) << "staged " << where << ": " << st.toString();
  testing::expectSameAsRing(f, ringOut, stagedOut, expected, stats, t, count, chunkBytes, where);
  f.mem.releaseAll();
}

TEST(DeviceStagedAllgather, BitIdenticalToTheRing) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  Options o;
  o.sliceBytes = 4096;
  Fixture f;
  testing::makeStagedFixture(o, &f);
  for (DataType t : kAllDataTypes) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(100003)}) {
      compareWithRing(f, t, count, 4096, false);
      if (count % 2 == 1) compareWithRing(f, t, count, 4096, true);
    }
  }
  compareWithRing(f, DataType::kFloat32, (8u << 20) + 3, 1u << 20, false);  // 32 MiB in 1 MiB chunks
  EXPECT_EQ(f.host->counters().detected, 0u);
  EXPECT_EQ(f.device->counters().detected, 0u);
}

TEST(DeviceStagedAllgather, FaultsInTheHostAllgathersDetectedAndRepaired) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  testing::underHostFaults([](Fixture& f) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64})
      compareWithRing(f, t, 300007, 64 << 10, false);
  });
}

}  // namespace
}  // namespace ringguard
