// Fault injection on the device executor's stream (docs/design/protocol.md, "Fault injection"): applies a
// CorruptionPlan (FaultInjector::plan) to a received payload or trailer in device memory, bit-identical to
// applyCorruptionPlan on the host, so that a fault lands in the stream's order between the transfer and the
// verify, with no host round trip and no synchronisation: the fault tests then exercise the production event
// ordering.
//
//  * xorBytesKernel: the byte edits (bit flips, bursts, a trailer bit), one thread per edit; the plan's
//    offsets are distinct, so no two threads touch one byte.
//  * garbageKernel: the whole payload replaced by the counter-based garbage of corruption_plan.h, 16-byte
//    vectors over the 16-byte-aligned part, grid-stride; the unaligned head and tail (fewer than 16 bytes
//    each) by the first threads of the grid. Byte 0, the one byte whose garbage depends on what it replaces,
//    is read and written by one thread.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/corruption_plan.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace ringguard {
namespace {

// ---- Launch geometry (scripts/regcheck.py reads the bounds from the __launch_bounds__ below) -----------
constexpr int kXorThreads = 64;  // one thread per edit, one block
static_assert(kXorThreads == CorruptionPlan::kMaxEdits, "a thread for every edit a plan can hold");
constexpr int kGarbageThreads = 256;
constexpr int kGarbageMinBlocks = 4;
constexpr uint64_t kVectorBytes = 16;
static_assert(2 * kVectorBytes <= kGarbageThreads, "block 0 covers head and tail, one byte per thread");

struct XorArgs {
  uint8_t* base;
  uint64_t offset[CorruptionPlan::kMaxEdits];
  uint8_t mask[CorruptionPlan::kMaxEdits];
  int edits;
};

__global__ void __launch_bounds__(kXorThreads, 1) xorBytesKernel(const __grid_constant__ XorArgs a) {
  const int k = static_cast<int>(threadIdx.x);
  if (k < a.edits) a.base[a.offset[k]] ^= a.mask[k];
}

// Bytes [0, head) and [head + vectors * 16, bytes) are single bytes; in between, 16-byte-aligned vectors.
struct GarbageArgs {
  uint8_t* base;
  uint64_t bytes;
  uint64_t seed;
  uint64_t head;
  uint64_t vectors;
};

// The 8 garbage bytes from payload offset `o` on (any o): two words of the stream, funnel-shifted.
__device__ __forceinline__ uint64_t garbageAt(uint64_t seed, uint64_t o) {
  const uint64_t w = o >> 3;
  const unsigned shift = static_cast<unsigned>(o & 7) * 8;
  const uint64_t lo = corruptionGarbageWord(seed, w);
  if (shift == 0) return lo;
  return (lo >> shift) | (corruptionGarbageWord(seed, w + 1) << (64 - shift));
}

__global__ void __launch_bounds__(kGarbageThreads, kGarbageMinBlocks)
    garbageKernel(const __grid_constant__ GarbageArgs a) {
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * kGarbageThreads + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * kGarbageThreads;
  const uint64_t tailBegin = a.head + a.vectors * kVectorBytes;
  if (tid < a.head) {
    a.base[tid] = corruptionGarbageByte(a.seed, tid, a.base[tid]);
  } else if (tid - a.head < a.bytes - tailBegin) {
    const uint64_t i = tailBegin + (tid - a.head);
    a.base[i] = corruptionGarbageByte(a.seed, i, a.base[i]);
  }
  uint4* v = reinterpret_cast<uint4*>(a.base + a.head);
  for (uint64_t j = tid; j < a.vectors; j += nthreads) {
    const uint64_t o = a.head + j * kVectorBytes;
    uint64_t lo = garbageAt(a.seed, o);
    const uint64_t hi = garbageAt(a.seed, o + 8);
    if (o == 0) {  // byte 0 (head 0): forced to change, as corruptionGarbageByte does
      const uint8_t old = a.base[0];
      if (static_cast<uint8_t>(lo) == old) lo ^= 1u;
    }
    v[j] = make_uint4(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32), static_cast<uint32_t>(hi),
                      static_cast<uint32_t>(hi >> 32));
  }
}

cuda_detail::ResidentBlocks gGarbageResidency;

Status launchGarbage(uint8_t* base, uint64_t bytes, uint64_t seed, cudaStream_t stream) {
  if (bytes == 0) return Status::ok();
  int resident = 0;
  RINGGUARD_RETURN_IF_ERROR(gGarbageResidency.get(
      garbageKernel, kGarbageThreads, 0, [](int) { return Status::ok(); }, &resident));
  GarbageArgs args{};
  args.base = base;
  args.bytes = bytes;
  args.seed = seed;
  const uint64_t misalign = reinterpret_cast<uintptr_t>(base) % kVectorBytes;
  args.head = std::min<uint64_t>(misalign == 0 ? 0 : kVectorBytes - misalign, bytes);
  args.vectors = (bytes - args.head) / kVectorBytes;
  const uint64_t wanted = std::max<uint64_t>(1, (args.vectors + kGarbageThreads - 1) / kGarbageThreads);
  const unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(wanted, static_cast<uint64_t>(resident)));
  garbageKernel<<<blocks, kGarbageThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace

Status corruptDevice(const CorruptionPlan& plan, void* payloadDevice, size_t bytes, Trailer* trailerDevice,
                     cudaStream_t stream) {
  if (!corruptionPlanFits(plan, bytes)) {
    return Status(StatusCode::kInvalidArgument, "corruptDevice: a plan for " + std::to_string(plan.bytes) +
                                                    " bytes with " + std::to_string(plan.edits) +
                                                    " edits does not fit a payload of " +
                                                    std::to_string(bytes) + " bytes");
  }
  uint8_t* base = nullptr;
  switch (plan.target) {
    case CorruptionPlan::Target::kNone:
      return Status::ok();
    case CorruptionPlan::Target::kPayload:
      base = static_cast<uint8_t*>(payloadDevice);
      break;
    case CorruptionPlan::Target::kTrailer:
      base = reinterpret_cast<uint8_t*>(trailerDevice);
      break;
  }
  if (base == nullptr && (plan.garbage ? plan.bytes : plan.edits) != 0) {
    return Status(StatusCode::kInvalidArgument, "corruptDevice: null payload or trailer pointer");
  }
  // The host's order: garbage first, then the edits (a plan has one or the other today).
  if (plan.garbage) RINGGUARD_RETURN_IF_ERROR(launchGarbage(base, plan.bytes, plan.seed, stream));
  if (plan.edits != 0) {
    XorArgs args{};
    args.base = base;
    args.edits = plan.edits;
    for (int k = 0; k < plan.edits; ++k) {
      args.offset[k] = plan.offset[k];
      args.mask[k] = plan.mask[k];
    }
    xorBytesKernel<<<1, kXorThreads, 0, stream>>>(args);
    RINGGUARD_CUDA_CHECK_LAUNCH();
  }
  return Status::ok();
}

}  // namespace ringguard
