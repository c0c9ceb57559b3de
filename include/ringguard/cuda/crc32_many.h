#pragma once
// Many CRC-32s on the device in two launches: the CUDA layer's public entry for the replica check's
// fingerprints (docs/REPLICAS.md), called by the torch bindings on torch's stream with torch's memory.
// CUDA-free (the stream handle is forward-declared), defined in ringguard::cuda.
#include <cstddef>
#include <cstdint>

#include "ringguard/core/status.h"

// Forward declaration of the runtime's stream handle, so this header does not need cuda_runtime_api.h.
typedef struct CUstream_st* cudaStream_t;

namespace ringguard {

// One buffer of crc32ManyDevice.
struct Crc32Span {
  const void* data;  // device address, any byte alignment; null only when bytes == 0
  size_t bytes;
};

// Bytes of temporary device storage crc32ManyDevice needs for these spans (depends on their sizes only).
size_t crc32ManyDeviceScratchBytes(const Crc32Span* spans, size_t n);

// crcsOutDevice[i] = the CRC-32 crc32Device gives for spans[i], for each of the `n` spans, in one launch of
// a persistent segment kernel (the tables filled once per block, not once per span) and one merge launch
// (a block per span), after two small host-to-device copies of the work table (pageable: staged when the
// call returns). `scratch` must hold crc32ManyDeviceScratchBytes (16-byte aligned) and stay untouched until
// the stream has passed this work. The replica check's device fingerprint (docs/REPLICAS.md).
Status crc32ManyDevice(const Crc32Span* spans, size_t n, uint32_t* crcsOutDevice, void* scratch,
                       size_t scratchBytes, cudaStream_t stream);

}  // namespace ringguard
