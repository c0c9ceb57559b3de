#pragma once
// What the mpirun GPU suites share: whether every rank has a usable device, and a device communicator
// over MPI_COMM_WORLD (the transport RINGGUARD_DEVICE_TRANSPORT says).
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "ringguard/runtime/mpi_device_communicator.h"

namespace ringguard {
namespace testing {

// All ranks agree whether a device is usable, so they skip (or run) together. *why says why not.
inline bool everyRankHasDevice(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  int mine = (e == cudaSuccess && n > 0) ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all && why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device on some rank";
  return all != 0;
}

inline std::unique_ptr<Communicator> makeDeviceComm(const Options& o) {
  cuda::DeviceOptions d;
  Status st = cuda::DeviceOptions::fromEnv(&d);
  std::unique_ptr<Communicator> c;
  if (st.isOk()) st = cuda::createDeviceCommunicator(o, d, &c);
  if (!st.isOk()) {
    fprintf(stderr, "createDeviceCommunicator: %s\n", st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return c;
}

}  // namespace testing
}  // namespace ringguard
