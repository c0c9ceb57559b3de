#pragma once
// bench_peer_steps's own kernels (peer_steps_kernels.cu): the clock rate, the cost of one step marker and the
// graph floor of the peer kernels' launch shape. CUDA-free.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/peer/peer_collectives.h"

namespace ringguard {
namespace peer {
namespace steps {

// SM cycles per globaltimer nanosecond, from a kernel that spins `spinNs` on the timer.
double clockCyclesPerNs(uint64_t spinNs);

// The median cycles between two consecutive step markers (what each step's delta includes besides its work).
double markerCycles();

// One launch of an empty kernel with the one-shot's grid (`blocks` x 512) and its parameters (a
// __grid_constant__ PeerAllreduceArgs and the rest), on `stream`.
void launchEmptyPeerKernel(const PeerAllreduceArgs& args, int blocks, cudaStream_t stream);

}  // namespace steps
}  // namespace peer
}  // namespace ringguard
