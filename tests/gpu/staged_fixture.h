#pragma once
// What the staged collectives' mpirun GPU suites (test_staged_allgather_device.cc,
// test_staged_allreduce_device.cc) share: per rank, the device communicator (the ring the staged result is
// compared with), the MPI host communicator the chunks go through, a device stager on the test's stream, and
// device buffers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device_comm_util.h"
#include "device_memory.h"
#include "ringguard/runtime/device_stager.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {
namespace testing {

struct StagedFixture {
  std::unique_ptr<Communicator> device, host;
  std::unique_ptr<cuda::DeviceStager> stager;
  DeviceMemory mem;
};

inline void makeStagedFixture(const Options& o, StagedFixture* f) {
  f->device = makeDeviceComm(o);  // makes the rank's GPU current
  ASSERT_TRUE(mpi::createCommunicator(o, &f->host).isOk());
  int gpu = -1;
  ASSERT_EQ(cudaGetDevice(&gpu), cudaSuccess);
  ASSERT_TRUE(cuda::makeDeviceStager(gpu, &f->stager).isOk());
  f->stager->setStream(f->mem.stream());
}

// The checks a comparison with the ring ends with, for a result of expected.size() bytes that the test
// made with f.mem.make (a sentinel byte 0xAB after it): the staged result equals the ring's and `expected`,
// nothing was written past it, and the staged call moved one chunk per `chunkBytes` of its `count` elements
// of `t` (one for an empty call).
inline void expectSameAsRing(StagedFixture& f, const void* ringOut, const void* stagedOut,
                             const std::vector<uint8_t>& expected, const StagedStats& stats, DataType t,
                             size_t count, size_t chunkBytes, const std::string& where) {
  const std::vector<uint8_t> ring = f.mem.read(ringOut, expected.size() + 1);
  const std::vector<uint8_t> staged = f.mem.read(stagedOut, expected.size() + 1);
  EXPECT_EQ(staged, ring) << where << ": the staged result differs from the ring's";
  EXPECT_EQ(std::vector<uint8_t>(staged.begin(), staged.end() - 1), expected) << where;
  EXPECT_EQ(staged.back(), 0xAB) << where << ": wrote past the result";
  const size_t chunkElems = chunkBytes / dataTypeSize(t);
  EXPECT_EQ(stats.chunks, count == 0 ? 1u : (count + chunkElems - 1) / chunkElems) << where;
}

// For each of three fault modes, a fresh fixture whose host communicator corrupts 5% of its slices (up to 5
// retries), `calls(f)` (which compares its results with the ring), then every injection detected and none
// escaped.
inline void underHostFaults(const std::function<void(StagedFixture&)>& calls) {
  for (FaultMode mode : {FaultMode::kBitFlip, FaultMode::kGarbage, FaultMode::kRetransmit}) {
    SCOPED_TRACE(faultModeName(mode));
    Options o;
    o.sliceBytes = 4096;
    o.maxRetries = 5;
    StagedFixture f;
    makeStagedFixture(o, &f);
    FaultOptions fault;
    fault.mode = mode;
    fault.probability = 0.05;
    fault.seed = 3;
    ASSERT_TRUE(f.host->setFault(fault).isOk());
    calls(f);
    const Counters c = f.host->counters();
    EXPECT_GT(c.injected, 0u);
    EXPECT_EQ(c.detected, c.injected);
    EXPECT_EQ(c.escaped, 0u);
  }
}

}  // namespace testing
}  // namespace ringguard
