#pragma once
// What the staged collectives' mpirun GPU suites (test_staged_allgather_device.cc,
// test_staged_allreduce_device.cc) share: per rank, the device communicator (the ring the staged result is
// compared with), the MPI host communicator the chunks go through, a device stager on the test's stream, and
// device buffers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

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

}  // namespace testing
}  // namespace ringguard
