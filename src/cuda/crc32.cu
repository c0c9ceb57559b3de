// CRC-32 of device memory, bit-identical to ringguard::crc32 on the host.
//
// Design (the goal is >= 80% of the copy bandwidth of an H200, ~3.4 TB/s, i.e. ~13 bytes per SM per clock):
//
//  * Table lookups are the bottleneck of a software CRC: one 32-bit shared-memory lookup per byte whatever
//    the slicing width. A warp-wide lookup into a plain 256-entry table hits ~3.5 lanes per bank on random
//    data, so it would run at ~9 lookups per SM per clock, below the 13 needed. The tables are therefore laid
//    out so that every lookup instruction is bank-conflict free (see "Shared-memory layout" below), and the
//    shared address of a lookup is built by a single PRMT: a byte costs one PRMT, one LDS and half a LOP3.
//
//  * Loads are fully coalesced 16-byte vectors: in every step the 1024 threads of a block read 16 KiB of
//    consecutive memory, thread t reading the 16-byte piece t. A thread therefore checksums every 1024th
//    piece of its block's segment, and between two of its pieces lie 16368 bytes that other threads own. CRC
//    is linear over GF(2), so the thread keeps a register that is advanced past those bytes as if they were
//    zeros: multiplying by x^(8*16368) mod P. That multiplication is folded into the tables of the piece's
//    last word ("jump" tables), so it costs nothing at run time. At the end each thread's register is
//    moved to the segment end with one multiplication by a precomputed constant and the block XOR-reduces.
//
//  * The grid is persistent (one block per SM) so that the table fill is paid once per SM, not once per
//    block's worth of data. Segment CRCs are merged by a one-block kernel with a tree of multiplications by
//    x^(8*segment bytes*2^level), constants the host computes; the unaligned head and tail bytes (< 16
//    each) are folded in there too.
//
// The tables, the per-thread loop and the plan live in crc32_segments.cuh: the fused verify + apply kernel
// of verify_apply.cu runs the same loop over the values it writes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/crc32_combine.h"
#include "cuda/crc32_segments.cuh"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace ringguard {
namespace {

using namespace crc_segments;

// ---- Launch geometry (scripts/regcheck.py reads the bounds from the __launch_bounds__ below) -----------
constexpr int kSegmentThreads = 1024;
constexpr int kSegmentMinBlocks = 1;  // 128 KiB of shared memory per block: one block per SM
constexpr int kFinalizeThreads = 512;
constexpr int kBatch = 4;  // pieces in flight per thread
static_assert(kSegmentThreads == crc_segments::kThreads, "the segment machinery's block size");

// Raw CRC of each block's segment of `base[0 .. numPieces)` to partials[blockIdx.x] (crcSegments). With a
// `verdict` word that says kOk (0), nothing: the caller's merge takes the verified CRC instead (the
// forwarded copy, FinalizeArgs::okCrc). Checked before the table fill, so a skipped launch costs ~nothing.
__global__ void __launch_bounds__(kSegmentThreads, kSegmentMinBlocks)
    crc32SegmentsKernel(const uint4* __restrict__ base, uint64_t numPieces, uint64_t segmentPieces,
                        uint32_t* __restrict__ partials, const uint32_t* __restrict__ verdict) {
  if (verdict != nullptr && *verdict == 0u) return;  // grid-uniform: every thread leaves
  LoadSource src{base};
  crcSegments<kBatch, false>(src, numPieces, segmentPieces, partials);
}

// Merges the segment CRCs and the unaligned head and tail into the conditioned CRC-32.
__global__ void __launch_bounds__(kFinalizeThreads, 1)
    crc32FinalizeKernel(const __grid_constant__ FinalizeArgs a) {
  __shared__ uint32_t tree[kMaxBlocks];
  finalizeCrc<kFinalizeThreads>(a, tree);
}

cuda_detail::ResidentBlocks gSegmentResidency;

Status segmentResidentBlocks(int* blocks) {
  return gSegmentResidency.get(
      crc32SegmentsKernel, kSegmentThreads, kDynamicSmemBytes,
      [](int) -> Status {
        RINGGUARD_CUDA_CHECK(cudaFuncSetAttribute(crc32SegmentsKernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(kDynamicSmemBytes)));
        return Status::ok();
      },
      blocks);
}

}  // namespace

Status crc_segments::launchCrc32Finalize(const FinalizeArgs& args, cudaStream_t stream) {
  crc32FinalizeKernel<<<1, kFinalizeThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

size_t crc32DeviceScratchBytes(size_t bytes) {
  return static_cast<size_t>(wantedBlocks(bytes / kPieceBytes)) * sizeof(uint32_t);
}

namespace {

// crc32Device and crc32DeviceUnlessOk: `verdict` and `okCrc` both null, or both device words.
Status launchCrc32(const char* what, const void* data, size_t bytes, const uint32_t* verdict,
                   const uint32_t* okCrc, uint32_t* crcOutDevice, void* scratch, size_t scratchBytes,
                   cudaStream_t stream) {
  if (crcOutDevice == nullptr)
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": null output pointer");
  if (data == nullptr && bytes != 0)
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": null data");
  const size_t needed = crc32DeviceScratchBytes(bytes);
  if (scratchBytes < needed || (needed != 0 && scratch == nullptr)) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": scratch of " +
                                                    std::to_string(scratchBytes) + " bytes, need " +
                                                    std::to_string(needed));
  }
  if (reinterpret_cast<uintptr_t>(scratch) % alignof(uint32_t) != 0) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": scratch must be 4-byte aligned");
  }

  int resident = 0;
  if (bytes >= kPieceBytes) RINGGUARD_RETURN_IF_ERROR(segmentResidentBlocks(&resident));
  SegmentPlan plan = planSegments(data, bytes, resident);
  plan.finalize.partials = static_cast<const uint32_t*>(scratch);
  plan.finalize.out = crcOutDevice;
  plan.finalize.verdict = verdict;
  plan.finalize.okCrc = okCrc;
  if (plan.blocks != 0) {
    crc32SegmentsKernel<<<plan.blocks, kSegmentThreads, kDynamicSmemBytes, stream>>>(
        reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(data) + plan.headBytes),
        plan.numPieces, plan.segmentPieces, static_cast<uint32_t*>(scratch), verdict);
    RINGGUARD_CUDA_CHECK_LAUNCH();
  }
  return launchCrc32Finalize(plan.finalize, stream);
}

}  // namespace

Status crc32Device(const void* data, size_t bytes, uint32_t* crcOutDevice, void* scratch, size_t scratchBytes,
                   cudaStream_t stream) {
  return launchCrc32("crc32Device", data, bytes, nullptr, nullptr, crcOutDevice, scratch, scratchBytes,
                     stream);
}

Status crc32DeviceUnlessOk(const void* data, size_t bytes, const uint32_t* verdictDevice,
                           const uint32_t* okCrcDevice, uint32_t* crcOutDevice, void* scratch,
                           size_t scratchBytes, cudaStream_t stream) {
  if (verdictDevice == nullptr || okCrcDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument, "crc32DeviceUnlessOk: null verdict or CRC pointer");
  }
  return launchCrc32("crc32DeviceUnlessOk", data, bytes, verdictDevice, okCrcDevice, crcOutDevice, scratch,
                     scratchBytes, stream);
}

Status crc32DeviceTableForTesting(uint32_t* tableHost) {
  if (tableHost == nullptr) return Status(StatusCode::kInvalidArgument, "crc32DeviceTableForTesting: null");
  RINGGUARD_CUDA_CHECK(
      cudaMemcpyFromSymbol(tableHost, kSliceTables, 256 * sizeof(uint32_t), 0, cudaMemcpyDeviceToHost));
  return Status::ok();
}

}  // namespace ringguard
