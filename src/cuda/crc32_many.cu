// CRC-32 of many device buffers in one launch (the replica check's fingerprints, docs/REPLICAS.md),
// bit-identical to ringguard::crc32 of each on the host. The segment machinery is crc32.cu's
// (crc32_segments.cuh): the same tables, per-thread loop, block reduction and merge; what differs is the
// grid. A persistent grid (one block per SM) fills the tables once and then walks a table of work items,
// each one segment of one buffer, so a model's hundreds of small tensors cost one table fill per SM
// instead of one per tensor; the merge is one block per buffer.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/crc32_segments.cuh"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace ringguard {
namespace {

using namespace crc_segments;

constexpr int kSegmentThreads = 1024;
constexpr int kSegmentMinBlocks = 1;  // 128 KiB of shared memory per block: one block per SM
constexpr int kFinalizeThreads = 256;
constexpr int kBatch = 4;
constexpr size_t kAlign = 16;
static_assert(kSegmentThreads == crc_segments::kThreads, "the segment machinery's block size");

// One segment of one buffer: pieces [segBegin, segBegin + n) of the 16-byte-aligned region at `base`.
struct ManyItem {
  const uint4* base;
  uint64_t segBegin;
  uint64_t n;
  uint32_t partial;  // index into the partials
  uint32_t pad;
};

struct LoadSource {
  using Loaded = uint4;
  const uint4* base;
  __device__ uint4 load(uint64_t piece) const { return loadStreaming(base + piece); }
  __device__ uint4 produce(const uint4& v, uint64_t) const { return v; }
};

__global__ void __launch_bounds__(kSegmentThreads, kSegmentMinBlocks)
    crc32ManySegmentsKernel(const ManyItem* __restrict__ items, uint32_t numItems,
                            uint32_t* __restrict__ partials) {
  extern __shared__ __align__(16) uint32_t dynamicSmem[];
  __shared__ uint32_t warpXor[kThreads / 32];
  const uint32_t tableAddr = fillTables(dynamicSmem);
  __syncthreads();
  const LaneLookup lanes = makeLaneLookup(tableAddr);
  for (uint32_t i = blockIdx.x; i < numItems; i += gridDim.x) {
    const ManyItem it = items[i];
    LoadSource src{it.base};
    const uint64_t piece = it.segBegin + threadIdx.x;
    const int64_t left = static_cast<int64_t>(it.n) - threadIdx.x;
    uint4 v[kBatch];
    loadBatch<kBatch>(src, piece, left, v);
    const uint32_t s = crcSegmentLoop<kBatch, false>(src, v, piece, left, lanes);
    crcBlockReduce(s, it.n, true, warpXor, partials + it.partial);
    __syncthreads();  // warpXor is reused by the next item
  }
}

__global__ void __launch_bounds__(kFinalizeThreads, 1) crc32ManyFinalizeKernel(const FinalizeArgs* args) {
  __shared__ uint32_t tree[kMaxBlocks];
  finalizeCrc<kFinalizeThreads>(args[blockIdx.x], tree);
}

cuda_detail::ResidentBlocks gManyResidency;

Status manyResidentBlocks(int* blocks) {
  return gManyResidency.get(
      crc32ManySegmentsKernel, kSegmentThreads, kDynamicSmemBytes,
      [](int) -> Status {
        RINGGUARD_CUDA_CHECK(cudaFuncSetAttribute(crc32ManySegmentsKernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(kDynamicSmemBytes)));
        return Status::ok();
      },
      blocks);
}

size_t alignUp(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Work items of every span before the residency cap: what the scratch is sized for.
size_t itemBound(const Crc32Span* spans, size_t n) {
  size_t items = 0;
  for (size_t i = 0; i < n; ++i) items += wantedBlocks(spans[i].bytes / kPieceBytes);
  return items;
}

}  // namespace

size_t crc32ManyDeviceScratchBytes(const Crc32Span* spans, size_t n) {
  const size_t items = itemBound(spans, n);
  return alignUp(items * sizeof(ManyItem)) + alignUp(n * sizeof(FinalizeArgs)) + items * sizeof(uint32_t);
}

Status crc32ManyDevice(const Crc32Span* spans, size_t n, uint32_t* crcsOutDevice, void* scratch,
                       size_t scratchBytes, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (spans == nullptr || crcsOutDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument, "crc32ManyDevice: null spans or output");
  }
  for (size_t i = 0; i < n; ++i) {
    if (spans[i].data == nullptr && spans[i].bytes != 0) {
      return Status(StatusCode::kInvalidArgument,
                    "crc32ManyDevice: span " + std::to_string(i) + " has null data");
    }
  }
  const size_t needed = crc32ManyDeviceScratchBytes(spans, n);
  if (scratch == nullptr || scratchBytes < needed || reinterpret_cast<uintptr_t>(scratch) % kAlign != 0) {
    return Status(StatusCode::kInvalidArgument, "crc32ManyDevice: scratch of " +
                                                    std::to_string(scratchBytes) + " bytes, need " +
                                                    std::to_string(needed) + " (16-byte aligned)");
  }
  int resident = 1;
  RINGGUARD_RETURN_IF_ERROR(manyResidentBlocks(&resident));

  auto* base = static_cast<unsigned char*>(scratch);
  const size_t bound = itemBound(spans, n);
  auto* itemsDevice = reinterpret_cast<ManyItem*>(base);
  auto* argsDevice = reinterpret_cast<FinalizeArgs*>(base + alignUp(bound * sizeof(ManyItem)));
  auto* partials = reinterpret_cast<uint32_t*>(base + alignUp(bound * sizeof(ManyItem)) +
                                               alignUp(n * sizeof(FinalizeArgs)));
  std::vector<ManyItem> items;
  std::vector<FinalizeArgs> args(n);
  for (size_t i = 0; i < n; ++i) {
    SegmentPlan plan = planSegments(spans[i].data, spans[i].bytes, resident);
    plan.finalize.partials = partials + items.size();
    plan.finalize.out = crcsOutDevice + i;
    const auto* aligned =
        reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(spans[i].data) + plan.headBytes);
    // Segment 0 is the short one, as crcSegments lays them out (the merge's multipliers assume it).
    const uint64_t firstLen =
        plan.blocks == 0 ? 0 : plan.numPieces - static_cast<uint64_t>(plan.blocks - 1) * plan.segmentPieces;
    for (uint32_t b = 0; b < plan.blocks; ++b) {
      ManyItem it{};
      it.base = aligned;
      it.segBegin = b == 0 ? 0 : firstLen + static_cast<uint64_t>(b - 1) * plan.segmentPieces;
      it.n = b == 0 ? firstLen : plan.segmentPieces;
      it.partial = static_cast<uint32_t>(items.size());
      items.push_back(it);
    }
    args[i] = plan.finalize;
  }
  // Pageable sources: each copy returns once its bytes are staged, so the vectors may go.
  if (!items.empty()) {
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(itemsDevice, items.data(), items.size() * sizeof(ManyItem),
                                         cudaMemcpyHostToDevice, stream));
  }
  RINGGUARD_CUDA_CHECK(
      cudaMemcpyAsync(argsDevice, args.data(), n * sizeof(FinalizeArgs), cudaMemcpyHostToDevice, stream));
  if (!items.empty()) {
    const uint32_t grid =
        static_cast<uint32_t>(std::min<size_t>(items.size(), static_cast<size_t>(resident)));
    crc32ManySegmentsKernel<<<grid, kSegmentThreads, kDynamicSmemBytes, stream>>>(
        itemsDevice, static_cast<uint32_t>(items.size()), partials);
    RINGGUARD_CUDA_CHECK_LAUNCH();
  }
  crc32ManyFinalizeKernel<<<static_cast<unsigned>(n), kFinalizeThreads, 0, stream>>>(argsDevice);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace ringguard
