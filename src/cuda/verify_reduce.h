#pragma once
// Host launchers of the verify + apply kernels the device executor enqueues (src/cuda/verify_apply.cu,
// trailer_kernels.cu; their planning is cuda/apply_plan.h), and a plain device reduction the tests compare
// with reduceHost. CUDA-free, like kernels.h: plain C++ translation units can include it.
//
// All launchers are asynchronous: they enqueue work on `stream` and return. Device pointers are used only
// by the enqueued work, so the caller keeps them alive until the stream has passed it. Work is launched on
// the calling thread's current device. Expected failures (bad arguments, CUDA errors at enqueue time) come
// back as Status.
//
// The arithmetic is reduceHost's own (core/element_ops.h, chosen by core/reduce_dispatch.h): f16 and bf16
// are computed in f32 and rounded to nearest even (NaN payloads kept and quieted exactly as floatToHalf /
// floatToBf16 do), integer sums and products wrap, avg divides by nranks (an int) at the final step, min /
// max are std::min / std::max (the first operand wins ties and NaN comparisons), premul_sum multiplies by
// premulScalar (the slot too at step 0: expected.step == 0 means the slot holds the sender's input, since
// nothing is forwarded into step 0), bitwise ops act on bytes, bool sums and products are or / and, complex
// dtypes reduce their parts. One exception, shared with every GPU: an f32 / f64 sum, product or quotient
// whose result is NaN is the canonical NaN on the device, where x86 propagates an input NaN's payload.
#include <cstddef>
#include <cstdint>

#include "core/trailer.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

// Forward declaration of the runtime's stream handle, so this header does not need cuda_runtime_api.h.
typedef struct CUstream_st* cudaStream_t;

namespace ringguard {

// One "verify, then reduce or copy" of a received slot (the device half of Executor::verifyAndApply).
// Every block of the kernel first computes the verdict exactly like checkSlice(*slotTrailer, expected,
// *payloadCrc) and touches dst only when it is SliceCheck::kOk.
struct DeviceApply {
  const Trailer* slotTrailer = nullptr;  // device: the trailer that arrived with the slot
  const uint32_t* payloadCrc = nullptr;  // device word: CRC-32 of the slot payload (crc32Device)
  SliceId expected;                      // what the schedule says must have arrived

  // Verdict outputs (a SliceCheck value), either may be null. verdictByte: a device-visible byte, e.g. the
  // device pointer of mapped pinned host memory; verdictWord: a device word for later kernels.
  uint8_t* verdictByte = nullptr;
  uint32_t* verdictWord = nullptr;

  void* dst = nullptr;          // device, element aligned
  const void* local = nullptr;  // device, element aligned; may alias dst (reduce only)
  const void* slot = nullptr;   // device, element aligned: the received payload
  size_t count = 0;             // elements
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool reduce = false;     // dst = local op slot (reduceSupported(dtype, op)); else dst = slot
  bool finalStep = false;  // avg divides by nranks here
  int nranks = 1;
};

// Enqueues the verify + apply kernel (one launch, whatever the size; at least one block, so the verdict is
// written even for count == 0).
Status verifyApplyDevice(const DeviceApply& apply, cudaStream_t stream);

// verifyApplyDevice, and the CRC-32 of what dst's count elements hold afterwards to the device word
// *dstCrcDevice: what a forwarded slice's trailer needs. When dst, local and slot are equally aligned
// modulo 16 (verifyApplyCrcFuses) one kernel does both, checksumming each 16 bytes of the result as it
// stores them (then a one-block merge); otherwise verifyApplyDevice then crc32Device(dst). Either way dst is
// untouched unless the verdict is kOk, and the CRC is that of dst as it then is. `scratch` holds
// crc32DeviceScratchBytes(count * element size) bytes, 4-byte aligned, unused by other work until the
// stream has passed this call.
Status verifyApplyCrcDevice(const DeviceApply& apply, uint32_t* dstCrcDevice, void* scratch,
                            size_t scratchBytes, cudaStream_t stream);
bool verifyApplyCrcFuses(const DeviceApply& apply);

// The forwarded copy of an all-gather step (apply.reduce false; apply.verdictWord required):
// verifyApplyDevice, then the CRC the outgoing trailer carries, to *outCrcDevice. After kOk that is
// *apply.payloadCrc: dst now holds exactly the bytes just verified, so it is not read again; after any other
// verdict it is the CRC of dst as it is (crc32DeviceUnlessOk), which a poisoned trailer must carry. Same
// result as verifyApplyCrcDevice for a copy, without its CRC work on the good path. `scratch` as
// verifyApplyCrcDevice.
Status verifyCopyCrcDevice(const DeviceApply& apply, uint32_t* outCrcDevice, void* scratch,
                           size_t scratchBytes, cudaStream_t stream);

// A slice received in place (ApplyTask::inPlace): the payload already lies where the result goes, so nothing
// is applied. One one-thread kernel writes the verdict, exactly checkSlice(*slotTrailer, expected,
// *payloadCrc) with payloadCrc the CRC of those bytes where they lie, and, when sealOut is not null, the
// trailer that forwards them: makeTrailer(next, *payloadCrc, kTrailerPoisoned unless the verdict is kOk).
// Either way that CRC is the verified one (kOk) or that of what is really sent on (poisoned).
struct DeviceVerify {
  const Trailer* slotTrailer = nullptr;  // device
  const uint32_t* payloadCrc = nullptr;  // device word
  SliceId expected;
  uint8_t* verdictByte = nullptr;  // either may be null, as in DeviceApply
  uint32_t* verdictWord = nullptr;
  SliceId next;                // the forwarded slice's identity
  Trailer* sealOut = nullptr;  // device; null: not forwarded
};
Status verifyInPlaceDevice(const DeviceVerify& verify, cudaStream_t stream);

// Enqueues a one-thread kernel writing *outDevice = makeTrailer(id, *crcDevice, flags) with the trailer
// CRC computed on the device, where flags is kTrailerPoisoned when verdictWord is not null and
// *verdictWord != SliceCheck::kOk, else 0.
Status sealTrailerDevice(const SliceId& id, const uint32_t* crcDevice, const uint32_t* verdictWordDevice,
                         Trailer* outDevice, cudaStream_t stream);

// Enqueues a one-thread kernel that sets trailerDevice->attempt = attempt and re-seals it (sealTrailer).
Status retagTrailerDevice(Trailer* trailerDevice, uint16_t attempt, cudaStream_t stream);

// dst[i] = a[i] op b[i] for `count` elements of device memory, exactly as reduceHost does on the host; dst
// may alias a or b. Pointers must be element aligned; 16-byte vectors are used where the three pointers
// share their alignment, narrower ones (down to single elements) where they do not.
// firstStep as reduceHost's (premul_sum scales b too).
Status reduceDevice(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                    bool finalStep, int nranks, cudaStream_t stream, bool firstStep = false);

}  // namespace ringguard
