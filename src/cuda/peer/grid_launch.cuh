#pragma once
// How a collective's grid is launched (cuda/peer/*.cu): on the caller's stream, and behind the arrival kernel
// (arrival.cu) as a programmatic dependent launch where the device has it (compute capability 9.0 and up),
// so the grid's launch overlaps the arrival kernel's end instead of following it (CUDA Programming Guide,
// "Programmatic Dependent Launch and Synchronization"): the arrival kernel lets the grid start once every
// peer arrived (releaseGrid), and the grid's blocks wait at entry for the arrival kernel to have finished and
// its writes to be visible (awaitArrivalKernel, in beginCollective). A graph captures the launch as a
// programmatic edge.
#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_check.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace peer {

// Whether `kernel` on the current device can be a programmatic dependent launch: a device of compute
// capability 9.0 or later running code compiled for it (a build for sm_80 only, run from its PTX on a Hopper,
// has griddepcontrol compiled out: peer_device.cuh).
template <typename Kernel>
bool programmaticLaunchAvailable(Kernel* kernel) {
  int device = 0, major = 0;
  cudaFuncAttributes attributes{};
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9 && cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
         attributes.ptxVersion >= 90;
}

// Launches `kernel<<<blocks, threads, 0, stream>>>(args...)`; `afterArrival` (the collective's arriveFirst:
// the arrival kernel was launched just before it on `stream`) makes it a programmatic dependent launch where
// one is available. Should the launch with the attribute be refused, the grid is launched the ordinary way:
// the arrival kernel is already queued and has published this rank's arrival, so the grid must follow it.
template <typename... Params, typename... Args>
Status launchPeerGrid(void (*kernel)(Params...), int blocks, int threads, void* stream, bool afterArrival,
                      Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(unsigned(threads));
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attribute[1] = {};
  if (afterArrival && programmaticLaunchAvailable(kernel)) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return Status::ok();
    cudaGetLastError();  // cleared: the ordinary launch below decides
    config.attrs = nullptr;
    config.numAttrs = 0;
  }
  RINGGUARD_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  return Status::ok();
}

}  // namespace peer
}  // namespace ringguard
