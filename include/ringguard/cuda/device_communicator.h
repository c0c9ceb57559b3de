#pragma once
// Communicators over device memory, bootstrapped from MPI. This header belongs to the layer that joins
// CUDA and MPI: it exposes MPI types.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {
namespace cuda {

enum class DeviceTransportKind { kAuto, kNccl, kStaged };

struct DeviceOptions {
  // kAuto: NCCL when built with it and no two ranks of a node share a GPU (NCCL refuses that), the
  // host-staged transport otherwise. Every rank must end up with the same kind; kAuto agrees over MPI.
  DeviceTransportKind transport = DeviceTransportKind::kAuto;
  int device = -1;                               // -1: node-local rank modulo the number of visible GPUs
  uint64_t poolReleaseThreshold = 256ull << 20;  // bytes the device pool may keep cached
  int ncclLanes = 4;  // NCCL communicators consecutive slices to a peer alternate over, in [1, 8]

  // Defaults overridden by RINGGUARD_DEVICE_TRANSPORT, RINGGUARD_POOL_RELEASE_BYTES and RINGGUARD_NCCL_LANES.
  static Status fromEnv(DeviceOptions* out);
  // Same through `lookup` (see Options::fromLookup).
  static Status fromLookup(const std::function<const char*(const char*)>& lookup, DeviceOptions* out);
};

// Creates a communicator whose collectives take device pointers and the caller's cudaStream_t. Selects
// the GPU (cudaSetDevice) on the calling thread too. Collective over `comm`.
Status createDeviceCommunicator(MPI_Comm comm, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out);

// A communicator over device memory on GPU `device.device` (which must be set) whose slices travel through
// pinned host memory over `host` (any host transport: MPI, c10d). Not collective.
Status createStagedCommunicator(std::unique_ptr<Transport> host, const Options& options,
                                const DeviceOptions& device, std::unique_ptr<Communicator>* out);

// NCCL without MPI (the c10d backend bootstraps through torch's Store): rank 0 makes an id with
// newNcclUniqueId and hands it to every rank, which calls createNcclCommunicator with it, its GPU in
// `device.device`, and a host transport over the same ranks as the control channel. Collective.
Status newNcclUniqueId(std::vector<uint8_t>* out);
Status createNcclCommunicator(const std::vector<uint8_t>& ncclId, std::unique_ptr<Transport> control,
                              const Options& options, const DeviceOptions& device,
                              std::unique_ptr<Communicator>* out);

// Was this build made with the NCCL transport?
bool haveNccl();

}  // namespace cuda
}  // namespace ringguard
