#pragma once
// Private to the CUDA layer: the segment machinery of the device CRC-32 (the design is described at the top
// of crc32.cu), shared by
//
//   * crc32.cu: crc32SegmentsKernel, the CRC of device memory (the Source loads the bytes);
//   * verify_apply.cu: the fused verify + apply + CRC kernel, which checksums what it writes in the same
//     pass (the Source reduces the slot into the accumulator and hands the result over).
//
// A segment kernel is one block of kThreads threads per SM, with kDynamicSmemBytes of dynamic shared memory
// for the tables. It runs crcSegments() over a Source; the plan (planSegments) and the merge of the segment
// CRCs (launchCrc32Finalize, defined in crc32.cu) are the host side.
//
// Everything here has internal linkage (unnamed namespace): each .cu that includes it gets its own copy of
// the device tables, as the build uses no separate device linking.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/crc32_combine.h"
#include "cuda/streaming_load.cuh"
#include "ringguard/core/status.h"

namespace ringguard {
namespace crc_segments {

// ---- Geometry ------------------------------------------------------------------------------------------
constexpr int kThreads = 1024;
constexpr uint64_t kPieceBytes = 16;
constexpr uint64_t kMinPiecesPerBlock = kThreads * 8;  // below 128 KiB a block is not worth its table fill
constexpr uint32_t kMaxBlocks = 1024;                  // bounds the scratch (4 KiB) and the merge tree
constexpr int kMaxLevels = 10;                         // log2(kMaxBlocks)
constexpr uint64_t kJumpBytes = kThreads * kPieceBytes - kPieceBytes;
constexpr uint32_t kTableBytes = 256 * 256;  // 256 rows (byte values) of 256 bytes
// The table must start at a 64 KiB-aligned shared address (see the layout below); wherever the dynamic
// shared memory starts, 128 KiB contain such a 64 KiB range.
constexpr size_t kDynamicSmemBytes = 2 * kTableBytes;

static_assert((1u << kMaxLevels) == kMaxBlocks, "the merge tree covers every block");
static_assert((kThreads & (kThreads - 1)) == 0, "per-thread position math uses shifts");

// What launchCrc32Finalize merges: the segment CRCs and the unaligned head and tail bytes.
struct FinalizeArgs {
  const unsigned char* head;  // bytes before the 16-byte-aligned region (read when the merge runs)
  const unsigned char* tail;  // bytes after it
  const uint32_t* partials;
  uint32_t* out;
  uint32_t headLen;
  uint32_t tailLen;
  uint32_t numPartials;
  uint32_t numLevels;               // ceil(log2(numPartials))
  uint32_t alignedShift;            // x^(8 * aligned bytes)
  uint32_t levelShift[kMaxLevels];  // x^(8 * segment bytes * 2^level)
  // Both null (always merge), or both device words: when *verdict is SliceCheck::kOk (0) the merge writes
  // *okCrc instead and reads no partials (the segment kernel skipped them too): the CRC of a forwarded copy
  // is the verified payload CRC, and dst needs checksumming only after a rejected slice.
  const uint32_t* verdict;
  const uint32_t* okCrc;
};

namespace {

// ---- Compile-time tables ---------------------------------------------------------------------------------

// x^n mod P in the reflected representation (x^0 is bit 31), by square-and-multiply over crc32Multiply.
__host__ __device__ constexpr uint32_t xPowConstexpr(uint64_t n) {
  uint32_t result = 1u << 31;
  uint32_t base = 1u << 30;  // x^1
  while (n != 0) {
    if (n & 1u) result = crc32Multiply(result, base);
    base = crc32Multiply(base, base);
    n >>= 1;
  }
  return result;
}

// v * x^-1 mod P. Multiplying by x maps v to (v >> 1) ^ (v & 1 ? P : 0); P has bit 31 set and v >> 1 has
// not, so bit 31 of the product tells which branch was taken and the step can be undone. (x is invertible
// because P has a constant term.)
__host__ __device__ constexpr uint32_t divideByX(uint32_t v) {
  const uint32_t low = v >> 31;
  return ((low != 0 ? v ^ kCrc32Polynomial : v) << 1) | low;
}

// t[0][k][b]: register after byte b followed by k zero bytes, from register 0: the slicing-by-4 tables
// (t[0][0] is the standard byte table). t[1][k][b]: the same advanced by a further kJumpBytes zero bytes.
struct SliceTables {
  uint32_t t[2][4][256];
};

__host__ __device__ constexpr SliceTables makeSliceTables() {
  SliceTables s{};
  for (uint32_t b = 0; b < 256; ++b) s.t[0][0][b] = crc32TableEntry(b);
  for (int k = 1; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = s.t[0][k - 1][b];
      s.t[0][k][b] = (prev >> 8) ^ s.t[0][0][prev & 0xffu];
    }
  }
  const uint32_t jump = xPowConstexpr(8 * kJumpBytes);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) s.t[1][k][b] = crc32Multiply(jump, s.t[0][k][b]);
  }
  return s;
}

// inv[d] = x^(-128 d) mod P: moves a thread's register back by d pieces (see the end of crcSegments).
struct InversePowers {
  uint32_t inv[kThreads];
};

__host__ __device__ constexpr InversePowers makeInversePowers() {
  uint32_t step = 1u << 31;
  for (uint64_t i = 0; i < 8 * kPieceBytes; ++i) step = divideByX(step);
  InversePowers p{};
  p.inv[0] = 1u << 31;
  for (int d = 1; d < kThreads; ++d) p.inv[d] = crc32Multiply(p.inv[d - 1], step);
  return p;
}

constexpr SliceTables kSliceTablesHost = makeSliceTables();
static_assert(kSliceTablesHost.t[0][0][1] == 0x77073096u, "standard CRC-32 table");
static_assert(kSliceTablesHost.t[0][0][255] == 0x2D02EF8Du, "standard CRC-32 table");
static_assert(crc32Multiply(makeInversePowers().inv[3], xPowConstexpr(3 * 128)) == (1u << 31),
              "x^-384 * x^384 == 1");

__device__ const SliceTables kSliceTables = makeSliceTables();
__device__ const InversePowers kInversePowers = makeInversePowers();

// ---- Shared-memory layout ------------------------------------------------------------------------------
//
// Byte offset of a table entry from the table start: value * 256 + group * 128 + position * 32 + copy * 4,
// where value is the byte (0..255), group 0 holds the slicing tables and group 1 the jump tables, position j
// (0..3) is the byte position inside a 32-bit word (byte j uses slicing table 3 - j) and copy (0..7) is one
// of 8 replicas. The bank of an entry is therefore position * 8 + copy, independent of the byte value. Lane
// l uses replica l / 4, and at lookup step k it handles byte (k + l) % 4 of the word: within one instruction
// the 32 lanes cover all 32 (position, copy) pairs, so every lookup is conflict free whatever the data.
//
// The table starts at a 64 KiB-aligned shared address T, so the address of an entry is T with byte 1
// replaced by the data byte and byte 0 by position * 32 + copy * 4 (< 256). One PRMT builds it: bytes 0, 2
// and 3 from a per-lane constant T | (position * 32 + copy * 4), byte 1 from the data word. The group offset
// is the LDS immediate, so a lookup needs no integer add.
struct LaneLookup {
  uint32_t off[4];  // T | (position * 32 + copy * 4) for the byte handled at step k
  uint32_t sel[4];  // PRMT selector: {off.b0, x.b[position], off.b2, off.b3}
};

// Passes a value through an opaque move so that the compiler keeps it in a register instead of recomputing
// it from threadIdx inside the hot loop (which it otherwise does to save registers we have to spare).
__device__ __forceinline__ uint32_t pinRegister(uint32_t v) {
  uint32_t r;
  asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}

__device__ __forceinline__ LaneLookup makeLaneLookup(uint32_t tableAddr) {
  const uint32_t lane = threadIdx.x & 31u;
  LaneLookup l;
#pragma unroll
  for (uint32_t k = 0; k < 4; ++k) {
    const uint32_t position = (k + lane) & 3u;
    l.off[k] = pinRegister(tableAddr | (position * 32u + (lane >> 2) * 4u));
    l.sel[k] = pinRegister(0x7604u | (position << 4));
  }
  return l;
}

// PRMT without the selector masking __byte_perm adds (our selectors are valid as they are).
__device__ __forceinline__ uint32_t bytePerm(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

__device__ __forceinline__ uint32_t loadShared(uint32_t sharedAddr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(sharedAddr));
  return v;
}

// Register after the 4 bytes of x (register already XORed with the data word), via group `kGroup` tables.
template <uint32_t kGroup>
__device__ __forceinline__ uint32_t lookupWord(uint32_t x, const LaneLookup& l) {
  constexpr uint32_t kOffset = kGroup * 128u;
  return loadShared(bytePerm(x, l.off[0], l.sel[0]) + kOffset) ^
         loadShared(bytePerm(x, l.off[1], l.sel[1]) + kOffset) ^
         loadShared(bytePerm(x, l.off[2], l.sel[2]) + kOffset) ^
         loadShared(bytePerm(x, l.off[3], l.sel[3]) + kOffset);
}

// One 16-byte piece: three slicing-by-4 steps and a final step through the jump tables, which also moves the
// register past the bytes the other threads of the block own before this thread's next piece.
__device__ __forceinline__ uint32_t crcPiece(uint32_t s, uint4 v, const LaneLookup& l) {
  s = lookupWord<0>(s ^ v.x, l);
  s = lookupWord<0>(s ^ v.y, l);
  s = lookupWord<0>(s ^ v.z, l);
  return lookupWord<1>(s ^ v.w, l);
}

using cuda_detail::loadStreaming;

// The Source of a CRC of the bytes themselves: piece j of the 16-byte-aligned region at `base` (crc32.cu,
// crc32_many.cu, bench_crc_many's variants).
struct LoadSource {
  using Loaded = uint4;
  const uint4* base;
  __device__ uint4 load(uint64_t piece) const { return loadStreaming(base + piece); }
  __device__ void prologue() {}
  __device__ void afterBarrier() {}
  __device__ uint4 produce(const uint4& v, uint64_t) const { return v; }
};

// Fills the tables into the block's dynamic shared memory (no barrier) and returns their shared address.
__device__ __forceinline__ uint32_t fillTables(uint32_t* dynamicSmem) {
  // First 64 KiB-aligned shared address in the dynamic allocation (no carry into the upper bits: shared
  // offsets are below 256 KiB).
  const uint32_t smemStart = static_cast<uint32_t>(__cvta_generic_to_shared(dynamicSmem));
  const uint32_t tableAddr = (smemStart + (kTableBytes - 1)) & ~(kTableBytes - 1);
  uint32_t* tableWords = dynamicSmem + (tableAddr - smemStart) / 4;
  // Word w = value * 64 + group * 32 + position * 8 + copy (see the layout above).
  for (uint32_t w = threadIdx.x; w < kTableBytes / 4; w += kThreads) {
    const uint32_t value = w >> 6;
    const uint32_t group = (w >> 5) & 1u;
    const uint32_t position = (w >> 3) & 3u;
    tableWords[w] = kSliceTables.t[group][3 - position][value];
  }
  return tableAddr;
}

// The body of a segment kernel: the raw (unconditioned, register starting at 0) CRC of this block's segment
// of the pieces [0, numPieces) that `src` produces, written to partials[blockIdx.x]. Segment 0 is the short
// one (numPieces minus (gridDim.x - 1) full segments of `segmentPieces`), so that every segment after it has
// the same length and the merge can use the same multiplier at each tree level.
//
// Loads are fully coalesced: in every step the kThreads threads read kThreads consecutive pieces, thread t
// piece t, so a thread checksums every kThreads-th piece of the segment and the jump tables skip the pieces
// between (crc32.cu, "Design"). kBatch pieces are in flight per thread.
//
// Source (all __device__):
//   using Loaded = ...;                               // what the loads of one piece hold
//   Loaded load(uint64_t piece) const;                // issues the loads of a piece
//   void prologue();                                  // all threads, before the barrier that ends the fill
//   void afterBarrier();                              // all threads, after it (e.g. read a shared verdict)
//   uint4 produce(const Loaded&, uint64_t piece) const;  // the 16 bytes of the piece to checksum
// The first batch of loads is issued before the table fill, so it overlaps it. With kPrefetch the loads
// of the next batch are issued before the current one is produced and checksummed, so that memory stays
// busy while a thread computes (the fused apply, whose produce() also stores); it costs a second batch of
// registers.
// Issues the loads of the kBatch pieces piece, piece + kThreads, ... that lie before the segment end
// (`left` pieces from `piece`); the others are zero.
template <int kBatch, typename Source>
__device__ __forceinline__ void loadBatch(const Source& src, uint64_t piece, int64_t left,
                                          typename Source::Loaded (&v)[kBatch]) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    v[u] = u * kThreads < left ? src.load(piece + u * kThreads) : typename Source::Loaded{};
  }
}

// The raw CRC register of this thread's pieces of a segment, from its first batch `v` (already loaded) on:
// see crcSegments.
template <int kBatch, bool kPrefetch, typename Source>
__device__ __forceinline__ uint32_t crcSegmentLoop(Source& src, typename Source::Loaded (&v)[kBatch],
                                                   uint64_t piece, int64_t left, const LaneLookup& lanes) {
  using Loaded = typename Source::Loaded;
  uint32_t s = 0;
  while (left > (kBatch - 1) * kThreads) {
    if constexpr (kPrefetch) {
      Loaded next[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int64_t ahead = static_cast<int64_t>(u + kBatch) * kThreads;
        next[u] = ahead < left ? src.load(piece + ahead) : Loaded{};
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) s = crcPiece(s, src.produce(v[u], piece + u * kThreads), lanes);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) v[u] = next[u];
      piece += kBatch * kThreads;
      left -= kBatch * kThreads;
    } else {
#pragma unroll
      for (int u = 0; u < kBatch; ++u) s = crcPiece(s, src.produce(v[u], piece + u * kThreads), lanes);
      piece += kBatch * kThreads;
      left -= kBatch * kThreads;
      loadBatch<kBatch>(src, piece, left, v);
    }
  }
#pragma unroll
  for (int u = 0; u < kBatch - 1; ++u) {
    if (u * kThreads < left) s = crcPiece(s, src.produce(v[u], piece + u * kThreads), lanes);
  }
  return s;
}

// Moves each thread's register to the end of the segment of `n` pieces and XORs the block's registers into
// *partial (when `store`). `warpXor` is kThreads / 32 words of shared memory; the caller separates two uses
// of it by a barrier.
__device__ __forceinline__ void crcBlockReduce(uint32_t s, uint64_t n, bool store, uint32_t* warpXor,
                                               uint32_t* __restrict__ partial) {
  const uint32_t tid = threadIdx.x;
  // Every piece went through the jump tables, so the register stands kThreads pieces after the start of
  // this thread's last piece; the segment ends d = last + kThreads - n pieces earlier. Move it back.
  if (tid < n) {
    const uint64_t last = tid + (((n - 1 - tid) / kThreads) * kThreads);
    const uint32_t d = static_cast<uint32_t>(last + kThreads - n);
    s = crc32Multiply(s, kInversePowers.inv[d]);
  }
  s = __reduce_xor_sync(0xffffffffu, s);
  if ((tid & 31u) == 0) warpXor[tid >> 5] = s;
  __syncthreads();
  if (tid < 32 && store) {
    s = tid < kThreads / 32 ? warpXor[tid] : 0u;
    s = __reduce_xor_sync(0xffffffffu, s);
    if (tid == 0) *partial = s;
  }
}

// The body of a segment kernel: the raw (unconditioned, register starting at 0) CRC of this block's segment
// of the pieces [0, numPieces) that `src` produces, written to partials[blockIdx.x]. Segment 0 is the short
// one (numPieces minus (gridDim.x - 1) full segments of `segmentPieces`), so that every segment after it has
// the same length and the merge can use the same multiplier at each tree level.
//
// Loads are fully coalesced: in every step the kThreads threads read kThreads consecutive pieces, thread t
// piece t, so a thread checksums every kThreads-th piece of the segment and the jump tables skip the pieces
// between (crc32.cu, "Design"). kBatch pieces are in flight per thread.
//
// Source (all __device__):
//   using Loaded = ...;                               // what the loads of one piece hold
//   Loaded load(uint64_t piece) const;                // issues the loads of a piece
//   void prologue();                                  // all threads, before the barrier that ends the fill
//   void afterBarrier();                              // all threads, after it (e.g. read a shared verdict)
//   uint4 produce(const Loaded&, uint64_t piece) const;  // the 16 bytes of the piece to checksum
// The first batch of loads is issued before the table fill, so it overlaps it. With kPrefetch the loads
// of the next batch are issued before the current one is produced and checksummed, so that memory stays
// busy while a thread computes (the fused apply, whose produce() also stores); it costs a second batch of
// registers.
template <int kBatch, bool kPrefetch, typename Source>
__device__ __forceinline__ void crcSegments(Source& src, uint64_t numPieces, uint64_t segmentPieces,
                                            uint32_t* __restrict__ partials) {
  extern __shared__ __align__(16) uint32_t dynamicSmem[];
  __shared__ uint32_t warpXor[kThreads / 32];
  using Loaded = typename Source::Loaded;

  const uint64_t firstLen = numPieces - static_cast<uint64_t>(gridDim.x - 1) * segmentPieces;
  const uint64_t segBegin =
      blockIdx.x == 0 ? 0 : firstLen + static_cast<uint64_t>(blockIdx.x - 1) * segmentPieces;
  const uint64_t n = firstLen + static_cast<uint64_t>(blockIdx.x) * segmentPieces - segBegin;
  const uint32_t tid = threadIdx.x;

  const uint64_t piece = segBegin + tid;
  const int64_t left = static_cast<int64_t>(n) - tid;  // pieces from `piece` to the segment end
  Loaded v[kBatch];
  loadBatch<kBatch>(src, piece, left, v);

  const uint32_t tableAddr = fillTables(dynamicSmem);
  src.prologue();
  __syncthreads();
  src.afterBarrier();

  const LaneLookup lanes = makeLaneLookup(tableAddr);
  const uint32_t s = crcSegmentLoop<kBatch, kPrefetch>(src, v, piece, left, lanes);
  crcBlockReduce(s, n, numPieces != 0, warpXor, partials + blockIdx.x);
}

// The merge of launchCrc32Finalize, run by one block of `kFinalizeThreads` threads: the segment CRCs of
// a.partials and the head and tail bytes into the conditioned CRC-32 at a.out. `tree` is kMaxBlocks words
// of shared memory.
template <uint32_t kFinalizeThreads>
__device__ __forceinline__ void finalizeCrc(const FinalizeArgs& a, uint32_t* tree) {
  if (a.verdict != nullptr && *a.verdict == 0u) {  // block-uniform, before any barrier
    if (threadIdx.x == 0) *a.out = *a.okCrc;
    return;
  }
  const uint32_t width = 1u << a.numLevels;
  const uint32_t pad = width - a.numPartials;
  // Right-aligned, zero-padded on the left: zeros contribute nothing, and every right subtree then covers
  // full-length segments only.
  for (uint32_t j = threadIdx.x; j < width; j += kFinalizeThreads) {
    tree[j] = j < pad ? 0u : a.partials[j - pad];
  }
  __syncthreads();
  // Level l: each node of 2^(l+1) leaves keeps its value at its last slot: left * x^(8 * right bytes) ^
  // right.
  for (uint32_t level = 0; level < a.numLevels; ++level) {
    const uint32_t half = 1u << level;
    for (uint32_t node = threadIdx.x; node < (width >> (level + 1)); node += kFinalizeThreads) {
      const uint32_t right = node * 2 * half + 2 * half - 1;
      tree[right] ^= crc32Multiply(tree[right - half], a.levelShift[level]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const uint32_t* table = kSliceTables.t[0][0];
    uint32_t s = 0xffffffffu;
    for (uint32_t k = 0; k < a.headLen; ++k) s = table[(s ^ a.head[k]) & 0xffu] ^ (s >> 8);
    if (a.numPartials != 0) s = crc32Multiply(s, a.alignedShift) ^ tree[width - 1];
    for (uint32_t k = 0; k < a.tailLen; ++k) s = table[(s ^ a.tail[k]) & 0xffu] ^ (s >> 8);
    *a.out = s ^ 0xffffffffu;
  }
}

}  // namespace

// ---- Host side -----------------------------------------------------------------------------------------

// A segment kernel's launch over `bytes` bytes at `data` (any byte address), for a kernel of which
// `resident` blocks fit on the device.
struct SegmentPlan {
  uint64_t headBytes = 0;  // before the first 16-byte boundary (fewer than 16)
  uint64_t numPieces = 0;  // 16-byte pieces from there
  uint64_t segmentPieces = 0;
  uint32_t blocks = 0;  // 0 when numPieces is 0
  FinalizeArgs finalize{};
};

// Blocks for numPieces pieces, before the device's residency cap: one per kMinPiecesPerBlock, at most
// kMaxBlocks. Also what crc32DeviceScratchBytes reserves, so it depends on the input size only.
// `minPieces` (at least kMinPiecesPerBlock) raises the pieces per block for a caller that has other work
// for the device's blocks (crc32_many.cu: many buffers in one launch).
inline uint32_t wantedBlocks(uint64_t numPieces, uint64_t minPieces = kMinPiecesPerBlock) {
  return static_cast<uint32_t>(std::min<uint64_t>((numPieces + minPieces - 1) / minPieces, kMaxBlocks));
}

// The plan, and the merge's arguments but for `partials` and `out`: at most `resident` segments, one per
// `minPieces` pieces or part of them (wantedBlocks), of equal length but the first.
inline SegmentPlan planSegments(const void* data, size_t bytes, int resident,
                                uint64_t minPieces = kMinPiecesPerBlock) {
  SegmentPlan plan;
  const auto* bytesIn = static_cast<const unsigned char*>(data);
  const size_t misalign = reinterpret_cast<uintptr_t>(data) % kPieceBytes;
  plan.headBytes = std::min<size_t>(misalign == 0 ? 0 : kPieceBytes - misalign, bytes);
  plan.numPieces = (bytes - plan.headBytes) / kPieceBytes;
  const uint64_t alignedBytes = plan.numPieces * kPieceBytes;

  FinalizeArgs& f = plan.finalize;
  f.head = bytesIn;
  f.headLen = static_cast<uint32_t>(plan.headBytes);
  f.tail = bytesIn == nullptr ? nullptr : bytesIn + plan.headBytes + alignedBytes;
  f.tailLen = static_cast<uint32_t>(bytes - plan.headBytes - alignedBytes);
  if (plan.numPieces == 0) return plan;

  const uint64_t target =
      std::min<uint64_t>(wantedBlocks(plan.numPieces, minPieces), static_cast<uint64_t>(resident));
  plan.segmentPieces = (plan.numPieces + target - 1) / target;
  plan.blocks = static_cast<uint32_t>((plan.numPieces + plan.segmentPieces - 1) / plan.segmentPieces);
  f.numPartials = plan.blocks;
  while ((1u << f.numLevels) < plan.blocks) ++f.numLevels;
  f.alignedShift = crc32XPow8n(alignedBytes);
  uint32_t shift = crc32XPow8n(plan.segmentPieces * kPieceBytes);
  for (uint32_t level = 0; level < f.numLevels; ++level) {
    f.levelShift[level] = shift;
    shift = crc32Multiply(shift, shift);
  }
  return plan;
}

// Enqueues the one-block kernel that merges the segment CRCs and the head and tail bytes into the
// conditioned CRC-32 at args.out (crc32.cu).
Status launchCrc32Finalize(const FinalizeArgs& args, cudaStream_t stream);

}  // namespace crc_segments
}  // namespace ringguard
