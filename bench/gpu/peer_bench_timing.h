#pragma once
// The peer benchmarks' clock (bench_peer_allreduce, bench_peer_steps): microseconds per call, by CUDA events
// on the stream, every rank starting each run together.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <vector>

namespace ringguard {
namespace bench {

// The median over `reps` runs of one run's time divided by `calls`: `run()` enqueues the calls on `s`.
template <typename Run>
double medianUsPerCall(cudaStream_t s, int calls, int reps, Run run) {
  std::vector<double> us;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(a, s);
    run();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    us.push_back(1000.0 * ms / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace bench
}  // namespace ringguard
