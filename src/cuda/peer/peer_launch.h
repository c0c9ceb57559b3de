#pragma once
// What every launcher of the one-sided collectives does on the host before its kernel (cuda/peer/*.cu):
// the common argument checks, made before any CUDA call, the grid, and the fingerprint's CRC. CUDA-free.
#include <cstddef>
#include <cstdint>

#include "core/peer_plan.h"
#include "cuda/peer/peer_collectives.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace peer {

// kInvalidArgument "peer <what>: ..." naming the argument at fault: ranks, windows, the record, and
// `publishedBytes` (what one rank publishes) against the window's capacity; `buffersNeeded` with null
// buffers (checked by the caller, which knows which buffer a rank uses).
Status checkWindowArgs(const PeerWindowArgs& args, const char* what, size_t publishedBytes);

// The grid: enough warps for `chunks` chunks, at most SMs / ranks blocks, so every block of every rank of one
// GPU is resident at once (a block spins on chunks other blocks publish). At least one block.
Status peerGrid(size_t chunks, int size, int* blocks);

// The CRC of the fingerprint words every chunk carries, with the kernel shape folded in (the one-shot's is
// the CRC of the words alone).
uint32_t peerFingerprintCrc(const PeerWindowArgs& args, PeerAlgorithm algorithm);

// The arrival kernel (arrival.cu) on `stream` when args.arriveFirst is set, else nothing: each collective's
// grid's launch (launchPeerGrid) calls it with the fingerprint CRC the grid publishes, just before the grid.
Status launchPeerArrival(const PeerWindowArgs& args, uint32_t fpCrc, void* stream);

// Whether the grid behind the arrival kernel can be a programmatic dependent launch (grid_launch.cuh) on the
// current device: compute capability 9.0 or later, running code compiled for it (a build for sm_80 only, run
// from its PTX on a Hopper, has griddepcontrol compiled out: peer_device.cuh). Read off the arrival kernel,
// which every collective's kernel shares its build with; found once per device.
bool programmaticGridLaunch();

// The allreduce's two kernels (allreduce_one_shot.cu, allreduce_two_shot.cu), arguments checked already.
Status launchAllreduceOneShot(const PeerAllreduceArgs& args, void* stream);
Status launchAllreduceTwoShot(const PeerAllreduceArgs& args, void* stream);

// Each launcher file's kernels loaded now (kernel_preload.h), every instantiation; preloadPeerKernels calls
// them all.
Status preloadAllreduceOneShot();
Status preloadAllreduceTwoShot();
Status preloadPeerAllgather();
Status preloadPeerBroadcast();
Status preloadPeerReduceScatter();
Status preloadPeerAlltoall();
Status preloadPeerSendRecv();
Status preloadPeerDecline();
Status preloadPeerArrival();
Status preloadPeerAbortMark();
Status preloadPeerClock();

}  // namespace peer
}  // namespace ringguard
