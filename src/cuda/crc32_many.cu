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

// A message's host words passed by value with the launch (runMessage), written by block 0 before any merge
// runs (the merge, launched after, writes the CRCs over their words): no host-to-device copy, whose pageable
// staging cost ~18 us of host time a check on an H100's host. Kept under the classic 4 KiB of kernel
// parameters; a longer message is copied instead. Three sizes of the parameter block, the smallest that
// holds the message taken: a launch's host time grows with its parameters (the 3.9 KiB block's launch took
// ~11 us of host time on an H100's host where the merge's took ~5).
constexpr uint32_t kInlineWords = 960;
template <uint32_t kCapacity>
struct InlineWords {
  uint32_t* out;  // null: none
  uint32_t count;
  uint32_t words[kCapacity];
};
static_assert(sizeof(InlineWords<kInlineWords>) + 4 * sizeof(void*) <= 4096,
              "the message kernel's parameters fit 4 KiB");

// Items are taken in table order (largest first: buildTables) by whichever block is free, from a counter
// in device memory: counters[0] the next item, counters[1] the blocks done. The last block out sets both
// back to 0 for the next launch (every block has taken its last item by then), so a launch finds them at 0
// with no host call; they are zeroed once when the table is uploaded. So runs over one table must never
// overlap (a plan orders its runs on one stream after the last: Crc32ManyPlan), and a launch cut short would
// leave them set, but a kernel cut short leaves the context unusable anyway (a sticky error).
__device__ __forceinline__ void manySegments(const ManyItem* __restrict__ items, uint32_t numItems,
                                             uint32_t* __restrict__ partials, uint32_t* counters) {
  extern __shared__ __align__(16) uint32_t dynamicSmem[];
  __shared__ uint32_t warpXor[kThreads / 32];
  __shared__ uint32_t nextItem;
  const uint32_t tableAddr = fillTables(dynamicSmem);
  if (threadIdx.x == 0) nextItem = atomicAdd(&counters[0], 1u);
  __syncthreads();
  const LaneLookup lanes = makeLaneLookup(tableAddr);
  // Every thread reads nextItem before crcBlockReduce's barrier; thread 0 rewrites it after.
  for (uint32_t i = nextItem; i < numItems; i = nextItem) {
    const ManyItem it = items[i];
    LoadSource src{it.base};
    const uint64_t piece = it.segBegin + threadIdx.x;
    const int64_t left = static_cast<int64_t>(it.n) - threadIdx.x;
    uint4 v[kBatch];
    loadBatch<kBatch>(src, piece, left, v);
    const uint32_t s = crcSegmentLoop<kBatch, false>(src, v, piece, left, lanes);
    crcBlockReduce(s, it.n, true, warpXor, partials + it.partial);
    if (threadIdx.x == 0) nextItem = atomicAdd(&counters[0], 1u);
    __syncthreads();  // nextItem written; warpXor is reused by the next item
  }
  if (threadIdx.x == 0) {
    __threadfence();  // this block's last take of counters[0] before its count of counters[1]
    if (atomicAdd(&counters[1], 1u) == gridDim.x - 1) {
      __threadfence();  // every other block's takes and counts before the reset
      counters[0] = 0;
      counters[1] = 0;
    }
  }
}

__global__ void __launch_bounds__(kSegmentThreads, kSegmentMinBlocks)
    crc32ManySegmentsKernel(const ManyItem* __restrict__ items, uint32_t numItems,
                            uint32_t* __restrict__ partials, uint32_t* counters) {
  manySegments(items, numItems, partials, counters);
}

// The same with a message's host words (InlineWords) written first by block 0.
template <uint32_t kCapacity>
__global__ void __launch_bounds__(kSegmentThreads, kSegmentMinBlocks)
    crc32ManyMessageKernel(const ManyItem* __restrict__ items, uint32_t numItems,
                           uint32_t* __restrict__ partials, uint32_t* counters,
                           const InlineWords<kCapacity> words) {
  if (blockIdx.x == 0) {
    for (uint32_t i = threadIdx.x; i < words.count; i += blockDim.x) words.out[i] = words.words[i];
  }
  manySegments(items, numItems, partials, counters);
}

__global__ void __launch_bounds__(kFinalizeThreads, 1) crc32ManyFinalizeKernel(const FinalizeArgs* args) {
  __shared__ uint32_t tree[kMaxBlocks];
  finalizeCrc<kFinalizeThreads>(args[blockIdx.x], tree);
}

constexpr uint32_t kSmallInline = 64, kMediumInline = 384;
const void* const kMessageKernels[] = {reinterpret_cast<const void*>(crc32ManyMessageKernel<kSmallInline>),
                                       reinterpret_cast<const void*>(crc32ManyMessageKernel<kMediumInline>),
                                       reinterpret_cast<const void*>(crc32ManyMessageKernel<kInlineWords>)};

cuda_detail::ResidentBlocks gManyResidency;

Status manyResidentBlocks(int* blocks) {
  return gManyResidency.get(
      crc32ManySegmentsKernel, kSegmentThreads, kDynamicSmemBytes,
      [](int) -> Status {
        // Every kernel of the launch: the same shared memory and bounds, so the residency of one is theirs.
        RINGGUARD_CUDA_CHECK(cudaFuncSetAttribute(crc32ManySegmentsKernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(kDynamicSmemBytes)));
        for (const void* message : kMessageKernels) {
          RINGGUARD_CUDA_CHECK(cudaFuncSetAttribute(message, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(kDynamicSmemBytes)));
        }
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

// The work table of `n` spans for one device block at `base` of crc32ManyDeviceScratchBytes (items, merge
// arguments, partials; the merge writes span i's CRC to crcsOut[i], or to crcsOut[positions[i]] given
// positions): the host vectors to copy there, and where each part lies.
struct Tables {
  std::vector<ManyItem> items;
  std::vector<FinalizeArgs> args;
  ManyItem* itemsDevice = nullptr;
  FinalizeArgs* argsDevice = nullptr;
  uint32_t* partials = nullptr;
  uint32_t* counters = nullptr;  // manySegments' two
};

// Segments of about a 1 / (resident x itemsPerBlock) share of all the pieces (Crc32ManyPlan's option,
// kDefaultItemsPerBlock for crc32ManyDevice): each item costs a block a first load's latency and a
// reduction (~2 us) on top of its bytes, and the last items taken set the launch's tail (a block that takes
// one just before the others run out finishes alone), so the share trades the one against the other; at the
// segment machinery's 128 KiB per block (~6 us of an SM's share of HBM) the small GPT's 329 MB ran at 2.2
// TB/s on an H100 (forty-sixth session), at about a quarter of the bytes per block (4 items) 2.3 TB/s, a
// single span of the same bytes 2.44 TB/s (forty-seventh); at half (2 items, the default) 2.46 TB/s against
// 2.52 for the single span (forty-eighth).
Tables buildTables(const Crc32Span* spans, size_t n, int resident, uint32_t itemsPerBlock, void* base,
                   uint32_t* crcsOut, const uint32_t* positions = nullptr) {
  Tables t;
  auto* bytes = static_cast<unsigned char*>(base);
  const size_t bound = itemBound(spans, n);
  t.itemsDevice = reinterpret_cast<ManyItem*>(bytes);
  t.argsDevice = reinterpret_cast<FinalizeArgs*>(bytes + alignUp(bound * sizeof(ManyItem)));
  t.partials = reinterpret_cast<uint32_t*>(bytes + alignUp(bound * sizeof(ManyItem)) +
                                           alignUp(n * sizeof(FinalizeArgs)));
  t.counters = t.partials + alignUp(bound * sizeof(uint32_t)) / sizeof(uint32_t);
  uint64_t totalPieces = 0;
  for (size_t i = 0; i < n; ++i) totalPieces += spans[i].bytes / kPieceBytes;
  const uint64_t share = static_cast<uint64_t>(std::max(resident, 1)) * itemsPerBlock;  // >= 1: the plan's
  const uint64_t minPieces = std::max<uint64_t>(kMinPiecesPerBlock, (totalPieces + share - 1) / share);
  t.args.resize(n);
  for (size_t i = 0; i < n; ++i) {
    SegmentPlan plan = planSegments(spans[i].data, spans[i].bytes, resident, minPieces);
    plan.finalize.partials = t.partials + t.items.size();
    plan.finalize.out = crcsOut + (positions == nullptr ? i : positions[i]);
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
      it.partial = static_cast<uint32_t>(t.items.size());
      t.items.push_back(it);
    }
    t.args[i] = plan.finalize;
  }
  // Largest first (each item keeps its partial's index), so the last items the blocks take are short.
  std::stable_sort(t.items.begin(), t.items.end(),
                   [](const ManyItem& a, const ManyItem& b) { return a.n > b.n; });
  return t;
}

// The tables' host vectors to the device (pageable sources: each copy returns once its bytes are staged,
// so the vectors may go).
Status uploadTables(const Tables& t, cudaStream_t stream) {
  if (!t.items.empty()) {
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(t.itemsDevice, t.items.data(), t.items.size() * sizeof(ManyItem),
                                         cudaMemcpyHostToDevice, stream));
  }
  if (!t.args.empty()) {
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(t.argsDevice, t.args.data(), t.args.size() * sizeof(FinalizeArgs),
                                         cudaMemcpyHostToDevice, stream));
  }
  RINGGUARD_CUDA_CHECK(cudaMemsetAsync(t.counters, 0, 2 * sizeof(uint32_t), stream));
  return Status::ok();
}

// The message kernel with the `count` host words at `words` (at most kCapacity) written to `out`.
template <uint32_t kCapacity>
void launchMessage(uint32_t grid, const ManyItem* items, uint32_t numItems, uint32_t* partials,
                   uint32_t* counters, uint32_t* out, const uint32_t* words, uint32_t count,
                   cudaStream_t stream) {
  InlineWords<kCapacity> inlined;
  inlined.out = out;
  inlined.count = count;
  std::copy(words, words + count, inlined.words);
  crc32ManyMessageKernel<kCapacity>
      <<<grid, kSegmentThreads, kDynamicSmemBytes, stream>>>(items, numItems, partials, counters, inlined);
}

// words: null, or a message's `count` host words (at most kInlineWords) to write to `out` before the merge
// (the segment launch made even with no item to carry them).
Status launchTables(const ManyItem* items, uint32_t numItems, const FinalizeArgs* args, size_t n,
                    uint32_t* partials, uint32_t* counters, int resident, cudaStream_t stream,
                    const uint32_t* words = nullptr, uint32_t count = 0, uint32_t* out = nullptr) {
  if (words != nullptr) {
    const uint32_t grid =
        std::max<uint32_t>(1, std::min<uint32_t>(numItems, static_cast<uint32_t>(resident)));
    if (count <= kSmallInline) {
      launchMessage<kSmallInline>(grid, items, numItems, partials, counters, out, words, count, stream);
    } else if (count <= kMediumInline) {
      launchMessage<kMediumInline>(grid, items, numItems, partials, counters, out, words, count, stream);
    } else {
      launchMessage<kInlineWords>(grid, items, numItems, partials, counters, out, words, count, stream);
    }
    RINGGUARD_CUDA_CHECK_LAUNCH();
  } else if (n > 0 && numItems > 0) {
    const uint32_t grid = std::min<uint32_t>(numItems, static_cast<uint32_t>(resident));
    crc32ManySegmentsKernel<<<grid, kSegmentThreads, kDynamicSmemBytes, stream>>>(items, numItems, partials,
                                                                                  counters);
    RINGGUARD_CUDA_CHECK_LAUNCH();
  }
  if (n == 0) return Status::ok();
  crc32ManyFinalizeKernel<<<static_cast<unsigned>(n), kFinalizeThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status checkSpans(const char* who, const Crc32Span* spans, size_t n) {
  if (spans == nullptr && n > 0)
    return Status(StatusCode::kInvalidArgument, std::string(who) + ": null spans");
  for (size_t i = 0; i < n; ++i) {
    if (spans[i].data == nullptr && spans[i].bytes != 0) {
      return Status(StatusCode::kInvalidArgument,
                    std::string(who) + ": span " + std::to_string(i) + " has null data");
    }
  }
  return Status::ok();
}

}  // namespace

size_t crc32ManyDeviceScratchBytes(const Crc32Span* spans, size_t n) {
  const size_t items = itemBound(spans, n);
  return alignUp(items * sizeof(ManyItem)) + alignUp(n * sizeof(FinalizeArgs)) +
         alignUp(items * sizeof(uint32_t)) + 2 * sizeof(uint32_t);
}

Status crc32ManyDevice(const Crc32Span* spans, size_t n, uint32_t* crcsOutDevice, void* scratch,
                       size_t scratchBytes, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (crcsOutDevice == nullptr) return Status(StatusCode::kInvalidArgument, "crc32ManyDevice: null output");
  RINGGUARD_RETURN_IF_ERROR(checkSpans("crc32ManyDevice", spans, n));
  const size_t needed = crc32ManyDeviceScratchBytes(spans, n);
  if (scratch == nullptr || scratchBytes < needed || reinterpret_cast<uintptr_t>(scratch) % kAlign != 0) {
    return Status(StatusCode::kInvalidArgument, "crc32ManyDevice: scratch of " +
                                                    std::to_string(scratchBytes) + " bytes, need " +
                                                    std::to_string(needed) + " (16-byte aligned)");
  }
  int resident = 1;
  RINGGUARD_RETURN_IF_ERROR(manyResidentBlocks(&resident));
  const Tables t =
      buildTables(spans, n, resident, Crc32ManyPlan::kDefaultItemsPerBlock, scratch, crcsOutDevice);
  RINGGUARD_RETURN_IF_ERROR(uploadTables(t, stream));
  return launchTables(t.itemsDevice, static_cast<uint32_t>(t.items.size()), t.argsDevice, n, t.partials,
                      t.counters, resident, stream);
}

Crc32ManyPlan::~Crc32ManyPlan() {
  if (device_ < 0) return;  // never ran
  const cuda_detail::DeviceGuard onDevice(device_);
  // cudaFree of stream-ordered memory waits for the device first: every run and every reader of its CRCs.
  if (memory_ != nullptr) (void)cudaFree(memory_);
  if (done_ != nullptr) (void)cudaEventDestroy(done_);
}

bool Crc32ManyPlan::sameTable(const Crc32Span* spans, const uint32_t* positions, size_t n, size_t numWords,
                              const uint32_t* into) const {
  if (memory_ == nullptr || n != spans_.size() || numWords != numWords_ || into != into_) return false;
  if ((positions == nullptr) != positions_.empty() && n > 0) return false;
  for (size_t i = 0; i < n; ++i) {
    if (spans[i].data != spans_[i].data || spans[i].bytes != spans_[i].bytes) return false;
    if (positions != nullptr && positions[i] != positions_[i]) return false;
  }
  return true;
}

Status Crc32ManyPlan::run(const Crc32Span* spans, size_t n, cudaStream_t stream,
                          const uint32_t** crcsDevice) {
  *crcsDevice = nullptr;
  if (n == 0) return Status::ok();
  return enqueue(spans, nullptr, n, nullptr, n, stream, crcsDevice, nullptr);
}

Status Crc32ManyPlan::runMessage(const Crc32Span* spans, const uint32_t* positions, size_t n,
                                 const uint32_t* hostWords, size_t numWords, cudaStream_t stream,
                                 const uint32_t** messageDevice, uint32_t* into) {
  *messageDevice = nullptr;
  if (numWords == 0 || hostWords == nullptr || (n > 0 && positions == nullptr)) {
    return Status(StatusCode::kInvalidArgument,
                  "crc32ManyPlan: a message of " + std::to_string(numWords) + " words needs its host words" +
                      (n > 0 ? " and the positions of its " + std::to_string(n) + " CRCs" : std::string()));
  }
  if (reinterpret_cast<uintptr_t>(into) % alignof(uint32_t) != 0) {
    return Status(StatusCode::kInvalidArgument, "crc32ManyPlan: the message buffer is not 4-byte aligned");
  }
  return enqueue(spans, positions, n, hostWords, numWords, stream, messageDevice, into);
}

Status Crc32ManyPlan::enqueue(const Crc32Span* spans, const uint32_t* positions, size_t n,
                              const uint32_t* hostWords, size_t numWords, cudaStream_t stream,
                              const uint32_t** out, uint32_t* into) {
  RINGGUARD_RETURN_IF_ERROR(checkSpans("crc32ManyPlan", spans, n));
  int device = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDevice(&device));
  if (device_ >= 0 && device != device_) {
    return Status(StatusCode::kInvalidArgument, "crc32ManyPlan: a run on device " + std::to_string(device) +
                                                    ", the plan's is " + std::to_string(device_));
  }
  // Inside a graph capture a rebuild's allocation would belong to the graph, and the kept table with it.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RINGGUARD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return Status(StatusCode::kInvalidArgument,
                  "crc32ManyPlan: the stream is being captured into a CUDA graph (the replica check runs "
                  "between steps, outside graphs)");
  }
  const bool same = sameTable(spans, positions, n, numWords, into);
  if (!same && positions != nullptr) {
    // Checked before anything is enqueued: a bad position would be a write outside the message.
    std::vector<bool> taken(numWords, false);
    for (size_t i = 0; i < n; ++i) {
      if (positions[i] >= numWords || taken[positions[i]]) {
        return Status(StatusCode::kInvalidArgument,
                      "crc32ManyPlan: span " + std::to_string(i) + "'s position " +
                          std::to_string(positions[i]) +
                          (positions[i] >= numWords
                               ? " is outside the message of " + std::to_string(numWords) + " words"
                               : " is another span's too"));
      }
      taken[positions[i]] = true;
    }
  }
  if (done_ == nullptr) {
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    device_ = device;
  }
  // On another stream than the last run: what that stream holds so far (the last launch and whatever read
  // its CRCs after it) goes first. An event, not a host wait.
  if (memory_ != nullptr && stream != stream_) {
    RINGGUARD_CUDA_CHECK(cudaEventRecord(done_, stream_));
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0));
  }
  stream_ = stream;
  int resident = 1;
  RINGGUARD_RETURN_IF_ERROR(manyResidentBlocks(&resident));
  if (!same || resident != resident_) {
    // The tables again, in a block of their own from the device's stream-ordered pool (no device-wide
    // synchronisation, as cudaMalloc/cudaFree would make), the old block released behind the work above.
    if (memory_ != nullptr) {
      void* old = memory_;
      memory_ = nullptr;
      spans_.clear();
      RINGGUARD_CUDA_CHECK(cudaFreeAsync(old, stream));
    }
    const size_t tableBytes = alignUp(crc32ManyDeviceScratchBytes(spans, n));
    void* mem = nullptr;
    // The message in the plan's block unless the caller gave its own buffer (tableBytes holds at least the
    // segment kernel's counters, so the block is never empty).
    const size_t blockBytes = tableBytes + (into != nullptr ? 0 : numWords * sizeof(uint32_t));
    RINGGUARD_CUDA_CHECK(cudaMallocAsync(&mem, blockBytes, stream));
    uint32_t* words =
        into != nullptr ? into : reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(mem) + tableBytes);
    const Tables t = buildTables(spans, n, resident, itemsPerBlock_, mem, words, positions);
    const Status up = uploadTables(t, stream);
    if (!up.isOk()) {
      (void)cudaFreeAsync(mem, stream);
      return up;
    }
    memory_ = mem;
    spans_.assign(spans, spans + n);
    if (positions != nullptr) {
      positions_.assign(positions, positions + n);
    } else {
      positions_.clear();
    }
    numWords_ = numWords;
    into_ = into;
    resident_ = resident;
    ++builds_;
    items_ = t.itemsDevice;
    numItems_ = static_cast<uint32_t>(t.items.size());
    args_ = t.argsDevice;
    partials_ = t.partials;
    counters_ = t.counters;
    words_ = words;
  }
  // The host words before the merge, which writes the CRCs over theirs: with the segment launch when they
  // fit its parameters, else copied (pageable: staged before the call returns).
  const bool inlineWords = hostWords != nullptr && numWords <= kInlineWords;
  if (hostWords != nullptr && !inlineWords) {
    RINGGUARD_CUDA_CHECK(
        cudaMemcpyAsync(words_, hostWords, numWords * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
  }
  // No event after the launches: a run on another stream records one on this stream then (above).
  RINGGUARD_RETURN_IF_ERROR(launchTables(static_cast<const ManyItem*>(items_), numItems_,
                                         static_cast<const FinalizeArgs*>(args_), n, partials_, counters_,
                                         resident, stream, inlineWords ? hostWords : nullptr,
                                         static_cast<uint32_t>(numWords), words_));
  *out = words_;
  return Status::ok();
}

}  // namespace ringguard
