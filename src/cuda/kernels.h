#pragma once
// Host launchers for the CUDA layer's kernels. This header is CUDA-free so that plain C++ translation units
// (the executors, the torch binding) can call the kernels without pulling in the CUDA headers.
//
// All launchers are asynchronous: they enqueue work on `stream` and return once it is enqueued. Device
// pointers are read and written only by the enqueued work, so the caller keeps them alive until the stream
// has passed it. Work is launched on the calling thread's current device, which must own `stream` and the
// memory. Expected failures (bad arguments, CUDA errors at enqueue time) come back as Status.
#include <cstddef>
#include <cstdint>

#include "core/corruption_plan.h"
#include "core/trailer.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "ringguard/cuda/crc32_many.h"

// Forward declaration of the runtime's stream handle, so this header does not need cuda_runtime_api.h.
typedef struct CUstream_st* cudaStream_t;

namespace ringguard {

// ---- CRC-32 ----------------------------------------------------------------------------------------------

// Bytes of temporary device storage crc32Device needs for an input of `bytes` bytes (CUB style: the caller
// provides it, e.g. from DevicePool). Small and bounded (at most 4 KiB); 0 for inputs below 16 bytes.
size_t crc32DeviceScratchBytes(size_t bytes);

// Writes the standard CRC-32 (the value ringguard::crc32(data, bytes) gives on the host, zlib/IEEE
// 802.3) of the `bytes` bytes at device address `data` to the device word `*crcOutDevice`. `data` may start
// at any byte address and may be null when bytes == 0. `scratch` must hold crc32DeviceScratchBytes(bytes)
// bytes (4-byte aligned) and must not be used by other work until the stream has passed this call.
Status crc32Device(const void* data, size_t bytes, uint32_t* crcOutDevice, void* scratch, size_t scratchBytes,
                   cudaStream_t stream);

// crc32Device, made conditional on a verdict the stream computes first (the forwarded copy of an all-gather
// step): when *verdictDevice is SliceCheck::kOk (0) as the stream reaches this work, *crcOutDevice gets
// *okCrcDevice (the verified payload CRC, which is what an applied copy holds) and `data` is not read;
// otherwise the CRC of `data`, exactly as crc32Device. Arguments as crc32Device; both words non-null.
Status crc32DeviceUnlessOk(const void* data, size_t bytes, const uint32_t* verdictDevice,
                           const uint32_t* okCrcDevice, uint32_t* crcOutDevice, void* scratch,
                           size_t scratchBytes, cudaStream_t stream);

// Copies the device's standard byte table (256 entries, the table zlib and boost::crc_32_type use) into
// host memory at `tableHost`. The kernels' slicing tables are derived from it at compile time; tests
// compare it with boost's. Synchronous.
Status crc32DeviceTableForTesting(uint32_t* tableHost);

// crc32ManyDevice and its span: ringguard/cuda/crc32_many.h (the CUDA layer's public entry for the replica
// check's bindings).

// ---- NaN / Inf scan --------------------------------------------------------------------------------------

// Result of nanScanDevice, in device memory. Both fields are plain 64-bit words so the struct can be read
// back with one 16-byte copy.
struct NanScanResult {
  unsigned long long count;       // number of non-finite elements (NaN, +Inf, -Inf)
  unsigned long long firstIndex;  // index of the first non-finite element, UINT64_MAX when there is none
};

// Scans `count` elements of type `dtype` at device address `data` for non-finite values and writes the
// complete result to `*resultDevice` (the launcher initialises it on the stream first, so one call is
// self-contained). Floating and complex types only: kFloat32, kFloat64, kFloat16, kBFloat16, and kComplex64
// and kComplex128 as their real and imaginary parts (the count is of non-finite parts, the first index is
// the complex element's); any other dtype gives kInvalidArgument. `data` must be aligned to the element size
// (every tensor is), not to 16 bytes: a misaligned head and tail are handled; a pointer that is not element
// aligned gives kInvalidArgument. `data` may be null when count == 0.
Status nanScanDevice(const void* data, size_t count, DataType dtype, NanScanResult* resultDevice,
                     cudaStream_t stream);

// One buffer of a multi-buffer scan.
struct NanScanSpan {
  const void* data;
  size_t count;
  DataType dtype;
  NanScanResult* result;  // device memory
};

// nanScanDevice over each of `n` spans, with the same results, in two launches per dtype per 64 spans
// (the table of spans is the kernels' parameter) instead of two per span: the guard scans an op's outputs
// and a step's gradients this way. Argument errors name the span; nothing is launched then.
Status nanScanManyDevice(const NanScanSpan* spans, size_t n, cudaStream_t stream);

// ---- Fault injection -------------------------------------------------------------------------------------

// Applies `plan` (FaultInjector::plan) on `stream`, bit-identical to applyCorruptionPlan on the host: to the
// `bytes` bytes at device address `payloadDevice` (a kPayload plan, made for exactly `bytes` bytes; any
// byte address) or to the 40 bytes at `trailerDevice` (a kTrailer plan). Byte edits are one small kernel,
// garbage a grid-stride kernel over the payload; a kNone plan enqueues nothing. kInvalidArgument when the
// plan does not fit (corruptionPlanFits) or its target pointer is null.
Status corruptDevice(const CorruptionPlan& plan, void* payloadDevice, size_t bytes, Trailer* trailerDevice,
                     cudaStream_t stream);

}  // namespace ringguard
