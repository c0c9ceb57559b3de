#pragma once
// Private to the CUDA layer: the trailer build and check of core/trailer_check.h on the device, with the
// body CRC from slicing-by-4 tables in constant memory. Everything here has internal linkage (unnamed
// namespace, as crc32_segments.cuh): each .cu that includes it gets its own copy of the tables, as the build
// uses no separate device linking.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/trailer.h"
#include "core/trailer_check.h"

namespace ringguard {
namespace cuda_detail {
namespace {

__constant__ trailer_check::WordCrcTables kTrailerCrcTables = trailer_check::makeWordCrcTables();

struct DeviceTrailerCrc {
  __device__ uint32_t operator()(const Trailer& t) const {
    return trailer_check::trailerWordsCrc(t, kTrailerCrcTables);
  }
};

// checkSlice of core/trailer.cc.
__device__ inline SliceCheck checkSliceDevice(const Trailer& t, const SliceId& expected, uint32_t crc) {
  return trailer_check::checkSlice(t, expected, crc, DeviceTrailerCrc{});
}

// makeTrailer of core/trailer.cc.
__device__ inline Trailer makeTrailerDevice(const SliceId& id, uint32_t payloadCrc, uint16_t flags) {
  return trailer_check::makeTrailer(id, payloadCrc, flags, DeviceTrailerCrc{});
}

// sealTrailer of core/trailer.cc.
__device__ inline void resealTrailerDevice(Trailer* t) { t->trailerCrc = DeviceTrailerCrc{}(*t); }

}  // namespace
}  // namespace cuda_detail
}  // namespace ringguard
