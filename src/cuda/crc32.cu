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
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.h"
#include "ringguard/core/crc32_combine.h"
#include "ringguard/cuda/kernels.h"

namespace ringguard {
namespace {

// ---- Launch geometry (scripts/regcheck.py reads the bounds from the __launch_bounds__ below) -----------
constexpr int kSegmentThreads = 1024;
constexpr int kSegmentMinBlocks = 1;  // 128 KiB of shared memory per block: one block per SM
constexpr int kFinalizeThreads = 512;
constexpr uint64_t kPieceBytes = 16;
constexpr int kBatch = 4;                                     // pieces in flight per thread
constexpr uint64_t kMinPiecesPerBlock = kSegmentThreads * 8;  // below 128 KiB a block is not worth its fill
constexpr uint32_t kMaxBlocks = 1024;                         // bounds the scratch (4 KiB) and the tree
constexpr int kMaxLevels = 10;                                // log2(kMaxBlocks)
constexpr uint64_t kJumpBytes = kSegmentThreads * kPieceBytes - kPieceBytes;
constexpr uint32_t kTableBytes = 256 * 256;  // 256 rows (byte values) of 256 bytes
// The table must start at a 64 KiB-aligned shared address (see the layout below); wherever the dynamic
// shared memory starts, 128 KiB contain such a 64 KiB range.
constexpr size_t kDynamicSmemBytes = 2 * kTableBytes;

static_assert((1u << kMaxLevels) == kMaxBlocks, "the merge tree covers every block");
static_assert((kSegmentThreads & (kSegmentThreads - 1)) == 0, "per-thread position math uses shifts");

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

// inv[d] = x^(-128 d) mod P: moves a thread's register back by d pieces (see the end of the segment kernel).
struct InversePowers {
  uint32_t inv[kSegmentThreads];
};

__host__ __device__ constexpr InversePowers makeInversePowers() {
  uint32_t step = 1u << 31;
  for (uint64_t i = 0; i < 8 * kPieceBytes; ++i) step = divideByX(step);
  InversePowers p{};
  p.inv[0] = 1u << 31;
  for (int d = 1; d < kSegmentThreads; ++d) p.inv[d] = crc32Multiply(p.inv[d - 1], step);
  return p;
}

constexpr SliceTables kSliceTablesHost = makeSliceTables();
static_assert(kSliceTablesHost.t[0][0][1] == 0x77073096u, "standard CRC-32 table");
static_assert(kSliceTablesHost.t[0][0][255] == 0x2D02EF8Du, "standard CRC-32 table");
static_assert(crc32Multiply(makeInversePowers().inv[3], xPowConstexpr(3 * 128)) == (1u << 31),
              "x^-384 * x^384 == 1");

__device__ const SliceTables kSliceTables = makeSliceTables();
__device__ const InversePowers kInversePowers = makeInversePowers();

// ---- Shared-memory layout
// -----------------------------------------------------------------------------------
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

// Streaming 16-byte load: the data is read once, so keep it out of L1 and let L2 fetch 256-byte sectors.
__device__ __forceinline__ uint4 loadStreaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Pieces p[0], p[T], p[2T], p[3T] (T = kSegmentThreads), those below `left` (the pieces left from p on).
__device__ __forceinline__ void loadBatch(const uint4* p, int64_t left, uint4 (&v)[kBatch]) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    v[u] = u * kSegmentThreads < left ? loadStreaming(p + u * kSegmentThreads) : make_uint4(0, 0, 0, 0);
  }
}

// Raw (unconditioned, register starting at 0) CRC of each block's segment of the 16-byte-aligned region
// `base[0 .. numPieces)`, written to partials[blockIdx.x]. Segment 0 is the short one (numPieces minus
// (gridDim.x - 1) full segments of `segmentPieces`), so that every segment after it has the same length and
// the merge can use the same multiplier at each tree level.
__global__ void __launch_bounds__(kSegmentThreads, kSegmentMinBlocks)
    crc32SegmentsKernel(const uint4* __restrict__ base, uint64_t numPieces, uint64_t segmentPieces,
                        uint32_t* __restrict__ partials) {
  extern __shared__ __align__(16) uint32_t dynamicSmem[];
  __shared__ uint32_t warpXor[kSegmentThreads / 32];

  const uint64_t firstLen = numPieces - static_cast<uint64_t>(gridDim.x - 1) * segmentPieces;
  const uint64_t segBegin =
      blockIdx.x == 0 ? 0 : firstLen + static_cast<uint64_t>(blockIdx.x - 1) * segmentPieces;
  const uint64_t n = firstLen + static_cast<uint64_t>(blockIdx.x) * segmentPieces - segBegin;
  const uint4* seg = base + segBegin;
  const uint32_t tid = threadIdx.x;

  // The first loads are in flight while the tables are being built.
  const uint4* p = seg + tid;
  int64_t left = static_cast<int64_t>(n) - tid;  // pieces from p to the segment end
  uint4 v[kBatch];
  loadBatch(p, left, v);

  // First 64 KiB-aligned shared address in the dynamic allocation (no carry into the upper bits: shared
  // offsets are below 256 KiB).
  const uint32_t smemStart = static_cast<uint32_t>(__cvta_generic_to_shared(dynamicSmem));
  const uint32_t tableAddr = (smemStart + (kTableBytes - 1)) & ~(kTableBytes - 1);
  uint32_t* tableWords = dynamicSmem + (tableAddr - smemStart) / 4;
  // Fill: word w = value * 64 + group * 32 + position * 8 + copy (see the layout above).
  for (uint32_t w = tid; w < kTableBytes / 4; w += kSegmentThreads) {
    const uint32_t value = w >> 6;
    const uint32_t group = (w >> 5) & 1u;
    const uint32_t position = (w >> 3) & 3u;
    tableWords[w] = kSliceTables.t[group][3 - position][value];
  }
  __syncthreads();

  const LaneLookup lanes = makeLaneLookup(tableAddr);
  uint32_t s = 0;
  while (left > (kBatch - 1) * kSegmentThreads) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) s = crcPiece(s, v[u], lanes);
    p += kBatch * kSegmentThreads;
    left -= kBatch * kSegmentThreads;
    loadBatch(p, left, v);
  }
#pragma unroll
  for (int u = 0; u < kBatch - 1; ++u) {
    if (u * kSegmentThreads < left) s = crcPiece(s, v[u], lanes);
  }

  // Every piece went through the jump tables, so the register stands kSegmentThreads pieces after the start
  // of this thread's last piece; the segment ends d = last + kSegmentThreads - n pieces earlier. Move it
  // back.
  if (tid < n) {
    const uint64_t last = tid + (((n - 1 - tid) / kSegmentThreads) * kSegmentThreads);
    const uint32_t d = static_cast<uint32_t>(last + kSegmentThreads - n);
    s = crc32Multiply(s, kInversePowers.inv[d]);
  }
  s = __reduce_xor_sync(0xffffffffu, s);
  if ((tid & 31u) == 0) warpXor[tid >> 5] = s;
  __syncthreads();
  if (tid < 32) {
    s = tid < kSegmentThreads / 32 ? warpXor[tid] : 0u;
    s = __reduce_xor_sync(0xffffffffu, s);
    if (tid == 0) partials[blockIdx.x] = s;
  }
}

struct FinalizeArgs {
  const unsigned char* head;  // bytes before the 16-byte-aligned region
  const unsigned char* tail;  // bytes after it
  const uint32_t* partials;
  uint32_t* out;
  uint32_t headLen;
  uint32_t tailLen;
  uint32_t numPartials;
  uint32_t numLevels;               // ceil(log2(numPartials))
  uint32_t alignedShift;            // x^(8 * aligned bytes)
  uint32_t levelShift[kMaxLevels];  // x^(8 * segment bytes * 2^level)
};

// Merges the segment CRCs and the unaligned head and tail into the conditioned CRC-32.
__global__ void __launch_bounds__(kFinalizeThreads, 1)
    crc32FinalizeKernel(const __grid_constant__ FinalizeArgs a) {
  __shared__ uint32_t tree[kMaxBlocks];
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

// Blocks for numPieces pieces, before the device's residency cap: one per kMinPiecesPerBlock, at most
// kMaxBlocks. Also what crc32DeviceScratchBytes reserves, so it depends on the input size only.
uint32_t wantedBlocks(uint64_t numPieces) {
  return static_cast<uint32_t>(
      std::min<uint64_t>((numPieces + kMinPiecesPerBlock - 1) / kMinPiecesPerBlock, kMaxBlocks));
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

size_t crc32DeviceScratchBytes(size_t bytes) {
  return static_cast<size_t>(wantedBlocks(bytes / kPieceBytes)) * sizeof(uint32_t);
}

Status crc32Device(const void* data, size_t bytes, uint32_t* crcOutDevice, void* scratch, size_t scratchBytes,
                   cudaStream_t stream) {
  if (crcOutDevice == nullptr)
    return Status(StatusCode::kInvalidArgument, "crc32Device: null output pointer");
  if (data == nullptr && bytes != 0) return Status(StatusCode::kInvalidArgument, "crc32Device: null data");
  const size_t needed = crc32DeviceScratchBytes(bytes);
  if (scratchBytes < needed || (needed != 0 && scratch == nullptr)) {
    return Status(StatusCode::kInvalidArgument, "crc32Device: scratch of " + std::to_string(scratchBytes) +
                                                    " bytes, need " + std::to_string(needed));
  }
  if (reinterpret_cast<uintptr_t>(scratch) % alignof(uint32_t) != 0) {
    return Status(StatusCode::kInvalidArgument, "crc32Device: scratch must be 4-byte aligned");
  }

  const auto* bytesIn = static_cast<const unsigned char*>(data);
  const size_t misalign = reinterpret_cast<uintptr_t>(data) % kPieceBytes;
  const size_t headLen = std::min<size_t>(misalign == 0 ? 0 : kPieceBytes - misalign, bytes);
  const uint64_t numPieces = (bytes - headLen) / kPieceBytes;
  const size_t alignedBytes = numPieces * kPieceBytes;

  FinalizeArgs args{};
  args.head = bytesIn;
  args.headLen = static_cast<uint32_t>(headLen);
  args.tail = bytesIn == nullptr ? nullptr : bytesIn + headLen + alignedBytes;
  args.tailLen = static_cast<uint32_t>(bytes - headLen - alignedBytes);
  args.partials = static_cast<const uint32_t*>(scratch);
  args.out = crcOutDevice;

  if (numPieces != 0) {
    int resident = 0;
    RINGGUARD_RETURN_IF_ERROR(segmentResidentBlocks(&resident));
    const uint64_t target = std::min<uint64_t>(wantedBlocks(numPieces), static_cast<uint64_t>(resident));
    const uint64_t segmentPieces = (numPieces + target - 1) / target;
    const uint32_t blocks = static_cast<uint32_t>((numPieces + segmentPieces - 1) / segmentPieces);

    args.numPartials = blocks;
    while ((1u << args.numLevels) < blocks) ++args.numLevels;
    args.alignedShift = crc32XPow8n(alignedBytes);
    uint32_t shift = crc32XPow8n(segmentPieces * kPieceBytes);
    for (uint32_t level = 0; level < args.numLevels; ++level) {
      args.levelShift[level] = shift;
      shift = crc32Multiply(shift, shift);
    }

    crc32SegmentsKernel<<<blocks, kSegmentThreads, kDynamicSmemBytes, stream>>>(
        reinterpret_cast<const uint4*>(bytesIn + headLen), numPieces, segmentPieces,
        static_cast<uint32_t*>(scratch));
    RINGGUARD_CUDA_CHECK_LAUNCH();
  }
  crc32FinalizeKernel<<<1, kFinalizeThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status crc32DeviceTableForTesting(uint32_t* tableHost) {
  if (tableHost == nullptr) return Status(StatusCode::kInvalidArgument, "crc32DeviceTableForTesting: null");
  RINGGUARD_CUDA_CHECK(
      cudaMemcpyFromSymbol(tableHost, kSliceTables, 256 * sizeof(uint32_t), 0, cudaMemcpyDeviceToHost));
  return Status::ok();
}

}  // namespace ringguard
