#pragma once
// The peer kernels are loaded when the path is made, not at their first launch. Lazy loading
// (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) loads a kernel at its first launch, and that load
// may wait for the kernels running in the context (CUDA Programming Guide, "Lazy Loading", "Potential
// Hazards: concurrent execution"). A peer kernel spins until its peers' kernels arrive, so a first launch
// behind one waits on the host for every peer: seen on the H100 on 2026-12-05, where the first all-gather
// after a held stream did not return until the stream ran (tests/gpu/test_peer_allreduce.cc,
// NoCollectiveWaitsOnTheHost), and two kernels on two streams that need each other would wait until the
// deadline. NCCL loads its kernels at init for the same reason (cudaFuncGetAttributes in
// ncclInitKernelsForDevice). Used by the launcher files (cuda/peer/*.cu).
#include <cuda_runtime.h>

#include <string>

#include "core/reduce_dispatch.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace peer {

// Loads `kernel` now: asking for its attributes loads it.
template <typename Kernel>
Status preloadKernel(Kernel* kernel) {
  cudaFuncAttributes attributes{};
  const cudaError_t e = cudaFuncGetAttributes(&attributes, kernel);
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();  // not left for an unrelated launch's check on this thread (auto falls back)
  return Status(StatusCode::kInternal,
                std::string("peer path: loading a kernel (cudaFuncGetAttributes): ") + cudaGetErrorString(e));
}

// Calls fn(tag) with every element operation a reducing peer kernel may be instantiated for: the final step
// (as every peer kernel reduces, core/reduce_dispatch.h) of every (dtype, op) pair the engine reduces, and
// premul_sum's (one operation for every factor: the bare kind stands for them, so no factor slot is taken;
// its dtypes are reduceSupported's for premul_sum). Pairs that share an operation call fn again for it,
// which loads nothing new.
template <typename Fn>
Status forEachFinalReduce(Fn&& fn) {
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (reduceSupported(dtype, op)) {
        RINGGUARD_RETURN_IF_ERROR(
            element_ops::dispatchReduce(dtype, op, /*finalStep=*/true, /*firstStep=*/false, fn));
      }
    }
    if (isFloatingType(dtype) || isComplexType(dtype)) {
      RINGGUARD_RETURN_IF_ERROR(element_ops::dispatchReduce(dtype, ReduceOp::kPremulSum, true, false, fn));
    }
  }
  return Status::ok();
}

}  // namespace peer
}  // namespace ringguard
