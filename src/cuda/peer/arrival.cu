// The arrival kernel (docs/design/protocol.md, "Arriving first"): one block, launched before a wide
// collective's grid when PeerWindowArgs::arriveFirst is set. It takes the collective's first steps as the
// grid will (the epoch, the acknowledgements, this rank's fingerprint words and arrival slot) and waits for
// every peer's arrival at this epoch with the same fingerprint, so the grid launches only once every rank has
// reached the call: a rank that comes early spins in one block while its peers still compute, instead of
// holding SMs / ranks blocks that slow them (GPU.md, "DDP with several ranks on one GPU"). The grid then
// takes the same steps again and finds them done. A failure (a deadline, a mismatch, a failed or exited peer,
// an abort) is this kernel's to report: the grid finds the error word set, publishes and reads nothing, and
// ends the collective (seq, done) as a failed one does. The grid is a programmatic dependent launch where the
// device has one (grid_launch.cuh): launched as this kernel releases it, so its launch overlaps this one's
// end.
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/cuda_check.h"
#include "cuda/peer/kernel_preload.h"
#include "cuda/peer/peer_device.cuh"
#include "cuda/peer/peer_launch.h"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernels' bounds from this file.
constexpr int kBlockThreads = 512;
constexpr int kCachedDevices = 64;
static_assert(kBlockThreads == kThreads, "the block size of peer_device.cuh");

__global__ void __launch_bounds__(kBlockThreads, 1)
    arrivalKernel(const __grid_constant__ PeerWindowArgs a, uint32_t fpCrc) {
  Collective k = beginCollective</*kTables=*/false>(a, fpCrc);
  checkArrivals(k);
  if (__syncthreads_or(blockFailed()) != 0 && threadIdx.x == 0) reportToHost(a, k.mine());
  releaseGrid();
}

}  // namespace

Status launchPeerArrival(const PeerWindowArgs& args, uint32_t fpCrc, void* stream) {
  if (!args.arriveFirst) return Status::ok();
  arrivalKernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, fpCrc);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

bool programmaticGridLaunch() {
  // Per device, found once: 0 not yet known, 1 available, -1 not. Devices past the table are asked each call.
  static std::atomic<int> known[kCachedDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (device >= 0 && device < kCachedDevices) {
    const int cached = known[device].load(std::memory_order_relaxed);
    if (cached != 0) return cached > 0;
  }
  int major = 0;
  cudaFuncAttributes attributes{};
  bool failed = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess;
  if (!failed && major >= 9) failed = cudaFuncGetAttributes(&attributes, arrivalKernel) != cudaSuccess;
  if (failed) cudaGetLastError();  // that call's error only
  const bool available = !failed && major >= 9 && attributes.ptxVersion >= 90;
  if (device >= 0 && device < kCachedDevices)
    known[device].store(available ? 1 : -1, std::memory_order_relaxed);
  return available;
}

Status preloadPeerArrival() { return preloadKernel(arrivalKernel); }

}  // namespace peer
}  // namespace ringguard
