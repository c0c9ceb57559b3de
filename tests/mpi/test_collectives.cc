// Every collective besides allreduce inside one mpirun, over shared memory under MPI (the default between
// the ranks of one host) or MPI alone (RINGGUARD_CPU_TRANSPORT=mpi): reduce-scatter (every dtype
// and op), all-gather, broadcast from every root, send/recv (ring shift), all-to-all (equal and unequal
// splits), fault-free against closed forms and then with fault injection in every mode (bit-identical,
// detected == injected, escaped == 0). RINGGUARD_TEST_SMOKE=1 runs a subset.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "collective_checks.h"

namespace ringguard {
namespace {

using testing::everyCollective;
using testing::HostMemory;
using testing::makeComm;
using testing::smoke;
using testing::sumOverRanks;
using testing::worldRank;
using testing::worldSize;

std::vector<size_t> counts(int n) {
  std::vector<size_t> c = {0, 1, size_t(n) - 1, size_t(n) + 1, 7, 1000, 4099};
  if (smoke()) c = {0, 1, 4099};
  return c;
}

TEST(MpiCollectives, EveryCollectiveDtypeAndCount) {
  Options options;
  options.sliceBytes = 512;  // several slices per block from 1000 elements on
  options.timeout = std::chrono::milliseconds(60000);
  auto comm = makeComm(options);
  HostMemory host;
  for (DataType t : kAllDataTypes) {
    for (size_t count : counts(worldSize())) everyCollective(*comm, host, t, count, true);
  }
  EXPECT_EQ(comm->counters().detected, 0u);
}

TEST(MpiCollectives, EveryFaultModeBitIdenticalAndDetected) {
  for (FaultMode mode : {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst, FaultMode::kGarbage,
                         FaultMode::kTrailer, FaultMode::kRetransmit, FaultMode::kDelay}) {
    if (smoke() && mode != FaultMode::kBitFlip) continue;
    SCOPED_TRACE(faultModeName(mode));
    Options options;
    options.sliceBytes = 1024;
    options.maxRetries = 5;
    options.timeout = std::chrono::milliseconds(60000);
    options.fault.mode = mode;
    options.fault.probability = 0.1;
    options.fault.seed = 11;
    options.fault.delayMs = 1;
    auto comm = makeComm(options);
    HostMemory host;
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      everyCollective(*comm, host, t, 3001, false);
    }
    const Counters c = comm->counters();
    const uint64_t injected = sumOverRanks(c.injected), detected = sumOverRanks(c.detected);
    EXPECT_EQ(sumOverRanks(c.escaped), 0u);
    EXPECT_EQ(detected, injected);
    if (mode == FaultMode::kDelay) {
      EXPECT_GT(sumOverRanks(c.delayed), 0u);
    } else {
      EXPECT_GT(injected, 0u);
    }
  }
}

}  // namespace
}  // namespace ringguard
