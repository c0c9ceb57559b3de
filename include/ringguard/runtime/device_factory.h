#pragma once
// Communicators over device memory, built from any bootstrap (MPI, c10d Store): the device half of the one
// place that builds communicators (host: ringguard/runtime/factories.h). Compiled into ringguard::device
// (CUDA, and NCCL when the build has it); no MPI type here.
#include <cstdint>
#include <functional>
#include <memory>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {
namespace cuda {

enum class DeviceTransportKind { kAuto, kNccl, kStaged, kPeer };

struct DeviceOptions {
  // kAuto: NCCL when built with it and no two ranks share a GPU (NCCL refuses that), the host-staged
  // transport otherwise, decided alike on every rank over the bootstrap; and when every rank is on one host,
  // the peer-window path besides (the collectives it takes run as device kernels with no host work:
  // docs/design/protocol.md, "The one-sided protocol"), or a warning naming why the windows could not be
  // mapped (no windows while Options::nanCheck is on: its scan is a host step). kPeer: the same, but an error
  // where the windows cannot be mapped or a NaN check is on, and send/recv and the split all-to-all take the
  // windows too (they can fail there where the pipeline succeeds; docs/GPU.md). Every rank must ask for the
  // same kind: ranks that differ all fail naming both.
  DeviceTransportKind transport = DeviceTransportKind::kAuto;
  int device = -1;                               // -1: node-local rank modulo the number of visible GPUs
  uint64_t poolReleaseThreshold = 256ull << 20;  // bytes the device pool may keep cached
  int ncclLanes = 4;  // NCCL communicators consecutive slices to a peer alternate over, in [1, 8]
  uint64_t peerBytes = 32ull << 20;  // payload bytes per collective of the peer-window path
  // Allreduces of the peer-window path from this many bytes on take the two-shot kernel (kAuto and kPeer
  // alike; every rank must set the same).
  uint64_t peerTwoShotBytes = 4ull << 20;
  // Collectives of the peer-window path moving more than this many bytes per rank wait for every rank's
  // arrival in a one-block kernel before their grid (ranks may differ).
  uint64_t peerArrivalBytes = 1ull << 20;
  // Payload bytes per slot of the peer-window path's send/recv channels (two per destination); only with
  // kPeer, which hands it the device send/recv between ranks of one host (0: they stay on the pipeline).
  uint64_t peerP2pBytes = 1ull << 20;
  // How the peer-window path shares its windows: VMM descriptors (pidfd_getfd), the legacy CUDA IPC handles,
  // or auto (VMM, else IPC on every rank with a warning). Every rank must ask for the same.
  enum class PeerHandles { kAuto, kVmm, kIpc };
  PeerHandles peerHandles = PeerHandles::kAuto;

  // Defaults overridden by RINGGUARD_DEVICE_TRANSPORT, RINGGUARD_POOL_RELEASE_BYTES, RINGGUARD_NCCL_LANES,
  // RINGGUARD_PEER_BYTES, RINGGUARD_PEER_TWO_SHOT_BYTES, RINGGUARD_PEER_ARRIVAL_BYTES,
  // RINGGUARD_PEER_P2P_BYTES and RINGGUARD_PEER_HANDLES.
  static Status fromEnv(DeviceOptions* out);
  // Same through `lookup` (see Options::fromLookup).
  static Status fromLookup(const std::function<const char*(const char*)>& lookup, DeviceOptions* out);
};

// A communicator whose collectives take device pointers and the caller's cudaStream_t, on GPU
// `device.device` (which it makes current on the calling thread). Its slices travel over NCCL (rank 0's
// unique id broadcast over `bootstrap`, the bootstrap's host transport as the control channel) or through
// pinned host memory over the bootstrap's host transport. Collective over `bootstrap`.
Status createDeviceCommunicator(Bootstrap& bootstrap, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out);

// Was this build made with the NCCL transport?
bool haveNccl();

}  // namespace cuda
}  // namespace ringguard
