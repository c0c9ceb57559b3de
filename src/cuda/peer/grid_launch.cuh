#pragma once
// How a collective's grid is launched (cuda/peer/*.cu): on the caller's stream, and behind the arrival kernel
// (arrival.cu) as a programmatic dependent launch where the device has it (compute capability 9.0 and up),
// so the grid's launch overlaps the arrival kernel's end instead of following it (CUDA Programming Guide,
// "Programmatic Dependent Launch and Synchronization"): the arrival kernel lets the grid start once every
// peer arrived (releaseGrid), and the grid's blocks wait at entry for the arrival kernel to have finished and
// its writes to be visible (awaitArrivalKernel, in beginCollective). A graph captures the launch as a
// programmatic edge.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/peer/peer_launch.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace peer {

// Launches the collective's arrival kernel when args.arriveFirst is set (launchPeerArrival), then
// `kernel<<<blocks, threads, 0, stream>>>(args, fpCrc, rest...)` behind it, as a programmatic dependent
// launch where one is available (programmaticGridLaunch). The arrival kernel is launched here, by the launch
// that has its grid in hand (inside dispatchReduce's choice of kernel), so a call that ends before its grid
// (an unsupported type or op) never leaves an arrival kernel queued alone: it has published this rank's
// arrival, and a grid must follow it. Should the launch with the attribute be refused, the grid is launched
// the ordinary way for the same reason.
template <typename... Params, typename WindowArgs, typename... Rest>
Status launchPeerGrid(void (*kernel)(Params...), int blocks, int threads, void* stream,
                      const WindowArgs& args, uint32_t fpCrc, Rest... rest) {
  RINGGUARD_RETURN_IF_ERROR(launchPeerArrival(args, fpCrc, stream));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(unsigned(threads));
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attribute[1] = {};
  if (args.arriveFirst && programmaticGridLaunch()) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, args, fpCrc, rest...) == cudaSuccess) return Status::ok();
    cudaGetLastError();  // cleared: the ordinary launch below decides
    config.attrs = nullptr;
    config.numAttrs = 0;
  }
  RINGGUARD_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args, fpCrc, rest...));
  return Status::ok();
}

}  // namespace peer
}  // namespace ringguard
