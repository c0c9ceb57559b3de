// The verify + apply kernels of the device executor (docs/design/protocol.md, "Executors"), bit-identical to
// the host executor: the verdict is checkSlice and the arithmetic reduceHost's, because both are the host's
// own code (core/trailer_check.h, core/element_ops.h; the operation of a (dtype, op) is chosen by
// core/reduce_dispatch.h for host and device alike).
//
//  * verifyApplyKernel<Op>: every block first computes the verdict of the slot (thread 0, from the trailer in
//    device memory and the payload CRC crc32Device left in a device word), exactly like checkSlice, and
//    only when it is kOk reduces (dst = local op slot) or copies (dst = slot) its grid-stride share
//    (cuda/apply_share.cuh, over the plan of cuda/apply_plan.h). Block 0 also writes the verdict (a byte in
//    mapped pinned memory, a word in device memory). dst is therefore never touched by a slice that failed,
//    whatever the block scheduling.
//  * verifyApplyCrcKernel<Op>: the same verify and apply, fused with the CRC-32 of what dst holds afterwards
//    (the segment loop of crc32_segments.cuh, one 1024-thread block per SM): each 16-byte piece of the
//    result is checksummed in registers as it is stored, so a forwarded slice needs no second read. It
//    needs dst, local and slot equally aligned modulo 16; verifyApplyCrcDevice falls back to the two
//    kernels otherwise. A block whose verdict is not kOk writes nothing and checksums dst as it is.
//  * A forwarded copy (all-gather) does not use the fused kernel: verifyCopyCrcDevice runs the plain copy
//    and then a CRC of dst that only runs after a bad verdict (crc32DeviceUnlessOk): after kOk the outgoing
//    CRC is the verified payload CRC, since dst holds exactly those bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/element_ops.h"
#include "core/reduce_dispatch.h"
#include "cuda/apply_plan.h"
#include "cuda/apply_share.cuh"
#include "cuda/crc32_segments.cuh"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/trailer_device.cuh"
#include "cuda/vector_words.cuh"
#include "cuda/verify_reduce.h"

namespace ringguard {
namespace {

using namespace element_ops;  // the apply operations the instantiation list names
using cuda_detail::applyHeadTail;
using cuda_detail::applyShare;
using cuda_detail::combineWords;
using cuda_detail::kUnroll;
using cuda_detail::loadWords;
using cuda_detail::Words;

// ---- Launch geometry (scripts/regcheck.py reads the bounds from the __launch_bounds__ below) -----------
constexpr int kApplyThreads = 256;
constexpr int kApplyMinBlocks = 4;
constexpr int kFusedThreads = 1024;  // verifyApplyCrcKernel: the CRC segment geometry
constexpr int kFusedMinBlocks = 1;   // 128 KiB of CRC tables in shared memory: one block per SM
constexpr int kFusedBatch = 1;       // pieces (16 bytes of each operand) per step, the next step's prefetched

static_assert(kFusedThreads == crc_segments::kThreads, "the fused kernel runs the CRC segment loop");
static_assert(kMaxVectorBytes == int(crc_segments::kPieceBytes), "a fused piece is one 16-byte vector");

static_assert(2 * kMaxVectorBytes <= kApplyThreads, "block 0 covers head and tail, one element per thread");

// ---- Kernels -------------------------------------------------------------------------------------------

struct ApplyKernelArgs {
  const Trailer* trailer;  // null: no verification (reduceDevice)
  const uint32_t* payloadCrc;
  SliceId expected;
  uint8_t* verdictByte;   // may be null
  uint32_t* verdictWord;  // may be null
  ApplyParams p;
};

// Thread 0 of every block: the verdict of the slot (kOk without a trailer: reduceDevice), published by
// block 0; *applies is whether the block may touch dst.
__device__ inline void blockVerdict(const ApplyKernelArgs& a, int* applies) {
  SliceCheck verdict = SliceCheck::kOk;
  if (a.trailer != nullptr) {
    const Trailer t = *a.trailer;
    verdict = cuda_detail::checkSliceDevice(t, a.expected, *a.payloadCrc);
  }
  *applies = verdict == SliceCheck::kOk;
  if (blockIdx.x == 0) {
    if (a.verdictByte != nullptr) *a.verdictByte = static_cast<uint8_t>(verdict);
    if (a.verdictWord != nullptr) *a.verdictWord = static_cast<uint32_t>(verdict);
  }
}

template <typename Op>
__global__ void __launch_bounds__(kApplyThreads, kApplyMinBlocks)
    verifyApplyKernel(const __grid_constant__ ApplyKernelArgs a) {
  __shared__ int applies;
  if (threadIdx.x == 0) blockVerdict(a, &applies);
  __syncthreads();
  if (!applies) return;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * kApplyThreads;
  applyShare<Op>(a.p, static_cast<uint64_t>(blockIdx.x) * kApplyThreads + threadIdx.x, nthreads);
}

// The fused kernel's arguments: the apply (p.vecBytes == 16: the vectors are the CRC pieces of dst) and
// the segment plan of dst.
struct FusedKernelArgs {
  ApplyKernelArgs apply;
  uint64_t segmentPieces;
  uint32_t* partials;  // the segment CRCs
};

// The crcSegments Source of the fused kernel: piece j is vector j of the apply, computed and stored by the
// thread that checksums it. When the verdict is not kOk nothing is stored and the piece is dst's own bytes
// (the loads of slot and local issued before the verdict was known are dropped).
template <typename Op>
struct ApplySource {
  struct Loaded {
    Words<16> x, y;  // local, slot
  };
  const ApplyKernelArgs& a;
  uint4* dst;
  const uint4* local;
  const uint4* slot;
  int* sharedApplies;
  bool applies = false;

  __device__ ApplySource(const ApplyKernelArgs& args, int* shared)
      : a(args),
        dst(reinterpret_cast<uint4*>(static_cast<typename Op::Elem*>(args.p.dst) + args.p.head)),
        local(Op::kReadsLocal ? reinterpret_cast<const uint4*>(
                                    static_cast<const typename Op::Elem*>(args.p.local) + args.p.head)
                              : nullptr),  // a copy has no local operand (null)
        slot(
            reinterpret_cast<const uint4*>(static_cast<const typename Op::Elem*>(args.p.slot) + args.p.head)),
        sharedApplies(shared) {}

  __device__ Loaded load(uint64_t j) const {
    Loaded v;
    const uint4 y = cuda_detail::loadStreaming(slot + j);  // slot: read-only for the kernel
    v.y = Words<16>{{y.x, y.y, y.z, y.w}};
    if constexpr (Op::kReadsLocal) v.x = loadWords<16>(local, j);  // may alias dst: a coherent load
    return v;
  }
  __device__ void prologue() {
    if (threadIdx.x == 0) blockVerdict(a, sharedApplies);
  }
  __device__ void afterBarrier() {
    applies = *sharedApplies != 0;
    if (applies && blockIdx.x == 0) applyHeadTail<Op>(a.p, threadIdx.x);  // before the merge reads them
  }
  __device__ uint4 produce(const Loaded& v, uint64_t j) const {
    if (!applies) return dst[j];
    const Words<16> r = combineWords<Op, 16>(v.x, v.y, a.p.arg);
    const uint4 out = make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
    dst[j] = out;
    return out;
  }
};

template <typename Op>
__global__ void __launch_bounds__(kFusedThreads, kFusedMinBlocks)
    verifyApplyCrcKernel(const __grid_constant__ FusedKernelArgs a) {
  __shared__ int applies;
  ApplySource<Op> src(a.apply, &applies);
  crc_segments::crcSegments<kFusedBatch, true>(src, a.apply.p.vectors, a.segmentPieces, a.partials);
}

// Every instantiation the launcher dispatches to.
#define RINGGUARD_APPLY_KERNELS(...)                                                                \
  template __global__ void verifyApplyKernel<__VA_ARGS__>(const __grid_constant__ ApplyKernelArgs); \
  template __global__ void verifyApplyCrcKernel<__VA_ARGS__>(const __grid_constant__ FusedKernelArgs);
#define RINGGUARD_APPLY_OPS(CONV)                  \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, SumFn>)  \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, ProdFn>) \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, MinFn>)  \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, MaxFn>)  \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, AvgFinalFn>)
RINGGUARD_APPLY_OPS(NativeConv<float>)
RINGGUARD_APPLY_OPS(NativeConv<double>)
RINGGUARD_APPLY_OPS(HalfConv)
RINGGUARD_APPLY_OPS(BFloatConv)
RINGGUARD_APPLY_OPS(NativeConv<int32_t>)
RINGGUARD_APPLY_OPS(NativeConv<int64_t>)
RINGGUARD_APPLY_OPS(NativeConv<uint8_t>)
RINGGUARD_APPLY_OPS(NativeConv<int16_t>)
// i8 sums and products run on the u8 kernels (two's complement: the same bits), so only the ops that read
// the sign are instantiated.
RINGGUARD_APPLY_KERNELS(ReduceOpT<NativeConv<int8_t>, MinFn>)
RINGGUARD_APPLY_KERNELS(ReduceOpT<NativeConv<int8_t>, MaxFn>)
RINGGUARD_APPLY_KERNELS(ReduceOpT<NativeConv<int8_t>, AvgFinalFn>)
#define RINGGUARD_APPLY_PREMUL(CONV)                       \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, PremulFn<true>>) \
  RINGGUARD_APPLY_KERNELS(ReduceOpT<CONV, PremulFn<false>>)
RINGGUARD_APPLY_PREMUL(NativeConv<float>)
RINGGUARD_APPLY_PREMUL(NativeConv<double>)
RINGGUARD_APPLY_PREMUL(HalfConv)
RINGGUARD_APPLY_PREMUL(BFloatConv)
RINGGUARD_APPLY_KERNELS(BitwiseOpT<BandFn>)
RINGGUARD_APPLY_KERNELS(BitwiseOpT<BorFn>)
RINGGUARD_APPLY_KERNELS(BitwiseOpT<BxorFn>)
RINGGUARD_APPLY_KERNELS(CopyOpT)
#undef RINGGUARD_APPLY_PREMUL
#undef RINGGUARD_APPLY_OPS
#undef RINGGUARD_APPLY_KERNELS

// ---- Launchers -----------------------------------------------------------------------------------------

template <typename Op>
Status launchApply(const ApplyKernelArgs& args, cudaStream_t stream) {
  static cuda_detail::ResidentBlocks residency;
  int resident = 0;
  RINGGUARD_RETURN_IF_ERROR(residency.get(
      verifyApplyKernel<Op>, kApplyThreads, 0, [](int) { return Status::ok(); }, &resident));
  const uint64_t perBlock = static_cast<uint64_t>(kApplyThreads) * kUnroll;
  const uint64_t wanted = std::max<uint64_t>(1, (args.p.vectors + perBlock - 1) / perBlock);
  const unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(wanted, static_cast<uint64_t>(resident)));
  verifyApplyKernel<Op><<<blocks, kApplyThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

// The fused kernel over args.p (16-byte vectors), then the merge of its segment CRCs into *crcOut.
template <typename Op>
Status launchApplyCrc(const ApplyKernelArgs& args, uint32_t* crcOut, void* scratch, cudaStream_t stream) {
  static cuda_detail::ResidentBlocks residency;
  int resident = 0;
  RINGGUARD_RETURN_IF_ERROR(residency.get(
      verifyApplyCrcKernel<Op>, kFusedThreads, crc_segments::kDynamicSmemBytes,
      [](int) -> Status {
        RINGGUARD_CUDA_CHECK(cudaFuncSetAttribute(verifyApplyCrcKernel<Op>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(crc_segments::kDynamicSmemBytes)));
        return Status::ok();
      },
      &resident));
  const size_t bytes = args.p.count * sizeof(typename Op::Elem);
  crc_segments::SegmentPlan plan = crc_segments::planSegments(args.p.dst, bytes, resident);
  if (plan.numPieces != args.p.vectors) {
    return Status(StatusCode::kInternal, "verifyApplyCrcDevice: " + std::to_string(args.p.vectors) +
                                             " vectors against " + std::to_string(plan.numPieces) +
                                             " pieces");
  }
  FusedKernelArgs fused{};
  fused.apply = args;
  fused.segmentPieces = plan.segmentPieces;
  fused.partials = static_cast<uint32_t*>(scratch);
  // At least one block: the verdict and the head and tail elements are written even without a piece.
  verifyApplyCrcKernel<Op>
      <<<std::max<uint32_t>(plan.blocks, 1), kFusedThreads, crc_segments::kDynamicSmemBytes, stream>>>(fused);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  plan.finalize.partials = fused.partials;
  plan.finalize.out = crcOut;
  return crc_segments::launchCrc32Finalize(plan.finalize, stream);
}

// The verification half of the kernel arguments of `a`.
void setVerify(ApplyKernelArgs* args, const DeviceApply& a) {
  args->trailer = a.slotTrailer;
  args->payloadCrc = a.payloadCrc;
  args->expected = a.expected;
  args->verdictByte = a.verdictByte;
  args->verdictWord = a.verdictWord;
}

// The operation of (dtype, op, finalStep, firstStep) is launched through core/reduce_dispatch.h.
template <typename Launch>
Status dispatchApply(const DeviceApply& a, Launch&& launch) {
  return dispatchReduce(a.dtype, a.op, a.finalStep, firstStepOf(a), launch);
}

}  // namespace

Status verifyApplyDevice(const DeviceApply& a, cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkDeviceApply("verifyApplyDevice", a));
  ApplyKernelArgs args{};
  setVerify(&args, a);
  args.p = planApply(a);
  if (!a.reduce) return launchApply<CopyOpT>(args, stream);
  return dispatchApply(a, [&](auto tag) { return launchApply<typename decltype(tag)::type>(args, stream); });
}

Status verifyApplyCrcDevice(const DeviceApply& a, uint32_t* dstCrcDevice, void* scratch, size_t scratchBytes,
                            cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkDeviceApply("verifyApplyCrcDevice", a));
  if (dstCrcDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument, "verifyApplyCrcDevice: null CRC output pointer");
  }
  const size_t bytes = a.count * dataTypeSize(a.dtype);
  const size_t needed = crc32DeviceScratchBytes(bytes);
  if (scratchBytes < needed || (needed != 0 && scratch == nullptr) ||
      reinterpret_cast<uintptr_t>(scratch) % alignof(uint32_t) != 0) {
    return Status(StatusCode::kInvalidArgument, "verifyApplyCrcDevice: scratch of " +
                                                    std::to_string(scratchBytes) + " bytes, need " +
                                                    std::to_string(needed) + " (4-byte aligned)");
  }
  ApplyKernelArgs args{};
  setVerify(&args, a);
  args.p = planApply(a);
  if (args.p.vecBytes != kMaxVectorBytes) {  // not equally aligned modulo 16: two passes
    RINGGUARD_RETURN_IF_ERROR(verifyApplyDevice(a, stream));
    return crc32Device(a.dst, bytes, dstCrcDevice, scratch, scratchBytes, stream);
  }
  if (!a.reduce) return launchApplyCrc<CopyOpT>(args, dstCrcDevice, scratch, stream);
  return dispatchApply(a, [&](auto tag) {
    return launchApplyCrc<typename decltype(tag)::type>(args, dstCrcDevice, scratch, stream);
  });
}

Status verifyCopyCrcDevice(const DeviceApply& a, uint32_t* outCrcDevice, void* scratch, size_t scratchBytes,
                           cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkDeviceApply("verifyCopyCrcDevice", a));
  if (a.reduce || a.verdictWord == nullptr || outCrcDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "verifyCopyCrcDevice: a copy (reduce false) with a verdict word and a CRC output");
  }
  RINGGUARD_RETURN_IF_ERROR(verifyApplyDevice(a, stream));
  // Stream order: the apply kernel's block 0 has written the verdict word when this reads it.
  return crc32DeviceUnlessOk(a.dst, a.count * dataTypeSize(a.dtype), a.verdictWord, a.payloadCrc,
                             outCrcDevice, scratch, scratchBytes, stream);
}

Status reduceDevice(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                    bool finalStep, int nranks, cudaStream_t stream, bool firstStep) {
  RINGGUARD_RETURN_IF_ERROR(checkOperands("reduceDevice", dtype, op, true, dst, a, b, count, nranks));
  ApplyKernelArgs args{};
  args.p = planReduce(dtype, op, dst, a, b, count, nranks);
  return dispatchReduce(dtype, op, finalStep, firstStep,
                        [&](auto tag) { return launchApply<typename decltype(tag)::type>(args, stream); });
}

}  // namespace ringguard
