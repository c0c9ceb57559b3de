#pragma once
// What the staged collectives' mpirun GPU suites (test_staged_allgather_device.cc,
// test_staged_allreduce_device.cc) share: per rank, the device communicator (the ring the staged result is
// compared with), the MPI host communicator the chunks go through, a device stager on the test's stream, and
// device buffers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "device_comm_util.h"
#include "device_memory.h"
#include "ringguard/runtime/device_stager.h"

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
