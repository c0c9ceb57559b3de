// bench_peer_steps's own kernels (peer_steps_kernels.h). Built with RINGGUARD_PEER_STEP_CLOCKS, as the
// allreduce kernels of that bench are, so the marker measured here is theirs.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/element_ops.h"
#include "cuda/peer/step_clock.cuh"
#include "peer_steps_kernels.h"

namespace ringguard {
namespace peer {
namespace steps {
namespace {

constexpr int kMarkers = 16;

__global__ void clockRateKernel(unsigned long long* out, uint64_t spinNs) {
  uint64_t c0, t0, c1, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0)::"memory");
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0)::"memory");
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)::"memory");
  } while (t1 - t0 < spinNs);
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1)::"memory");
  out[0] = c1 - c0;
  out[1] = t1 - t0;
}

__global__ void __launch_bounds__(512, 1) markerKernel(unsigned long long* out) {
  RINGGUARD_STEP_ENTRY();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kMarkers; ++i) RINGGUARD_STEP(i);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int i = 0; i < kMarkers; ++i) out[i] = stepShared().clock[i];
  }
}

__global__ void __launch_bounds__(512, 1)
    emptyKernel(const __grid_constant__ PeerAllreduceArgs a, uint32_t, size_t, element_ops::OpArg) {}

}  // namespace

double clockCyclesPerNs(uint64_t spinNs) {
  unsigned long long* d = nullptr;
  unsigned long long h[2] = {0, 0};
  cudaMalloc(&d, sizeof h);
  clockRateKernel<<<1, 1>>>(d, spinNs);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return h[1] == 0 ? 0.0 : double(h[0]) / double(h[1]);
}

double markerCycles() {
  unsigned long long* d = nullptr;
  unsigned long long h[kMarkers] = {};
  cudaMalloc(&d, sizeof h);
  std::vector<double> deltas;
  for (int rep = 0; rep < 5; ++rep) {
    markerKernel<<<1, 512>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 1; i < kMarkers; ++i) deltas.push_back(double(h[i] - h[i - 1]));
  }
  cudaFree(d);
  std::sort(deltas.begin(), deltas.end());
  return deltas[deltas.size() / 2];
}

void launchEmptyPeerKernel(const PeerAllreduceArgs& args, int blocks, cudaStream_t stream) {
  emptyKernel<<<blocks, 512, 0, stream>>>(args, 0u, 0, element_ops::OpArg{args.size, 1.0});
}

}  // namespace steps
}  // namespace peer
}  // namespace ringguard
