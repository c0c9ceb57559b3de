#pragma once
// Private to the CUDA layer: the 16-byte load of the streaming kernels (CRC, NaN scan, fused apply + CRC).
#include <cuda_runtime.h>

namespace ringguard {
namespace cuda_detail {

// Streaming 16-byte load of memory the kernel only reads: keep it out of L1 (it is read once) and let L2
// fetch 256-byte sectors.
static __device__ __forceinline__ uint4 loadStreaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace cuda_detail
}  // namespace ringguard
