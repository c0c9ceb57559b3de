// Non-finite (NaN / +-Inf) scan of device memory: count and first index.
//
// The scan is a pure stream (goal: >= 90% of the copy bandwidth), so the kernel is shaped for memory
// throughput only: a resident grid, 16-byte vector loads with the L2 256-byte prefetch hint, four loads in
// flight per thread, and a fast path that decides "no non-finite element in these 16 bytes" with two
// integer operations per 32-bit word. Elements are located and counted on a slow path that only runs for
// vectors that hold a non-finite value, and the per-warp results reach the global result with one atomic
// pair per warp, and only from warps that found something.
//
// The test per 32-bit word: an element is non-finite iff its exponent field is all ones, i.e. iff
// (bits & E) == E for the exponent mask E. Adding the lowest exponent bit to (bits & E) carries into the bit
// above the exponent exactly in that case, so ((w & M) + A) has the "flag" bit set for every non-finite
// element of the word and never carries across elements (for 16-bit types the sum of a half is at most
// 0x8000). Sign bits are masked off, so -Inf and negative NaNs count too.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/element_bits.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/streaming_load.cuh"

namespace ringguard {
namespace {

constexpr int kScanThreads = 256;
constexpr int kScanMinBlocks = 4;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread

// Per-dtype constants: element width, and mask M, addend A and flag bits F of the word test above.
struct F32 {
  using Scalar = uint32_t;
  static constexpr int kPerVector = 4;
  static constexpr uint32_t kMask = 0x7f800000u;
  static constexpr uint32_t kAdd = 0x00800000u;
  static constexpr uint32_t kFlags = 0x80000000u;
  __device__ static bool scalarBad(Scalar s) { return (s & kMask) == kMask; }
};
struct F16 {
  using Scalar = uint16_t;
  static constexpr int kPerVector = 8;
  static constexpr uint32_t kMask = 0x7c007c00u;
  static constexpr uint32_t kAdd = 0x04000400u;
  static constexpr uint32_t kFlags = 0x80008000u;
  __device__ static bool scalarBad(Scalar s) { return (s & 0x7c00u) == 0x7c00u; }
};
struct BF16 {
  using Scalar = uint16_t;
  static constexpr int kPerVector = 8;
  static constexpr uint32_t kMask = 0x7f807f80u;
  static constexpr uint32_t kAdd = 0x00800080u;
  static constexpr uint32_t kFlags = 0x80008000u;
  __device__ static bool scalarBad(Scalar s) { return (s & 0x7f80u) == 0x7f80u; }
};
// float8: four elements per word. e5m2 is IEEE-like (exponent mask 0x7c); e4m3fn has no infinity and its only
// non-finite value is NaN, S.1111.111, so its mask covers exponent and mantissa and adding 1 carries into the
// sign position exactly for a NaN.
struct F8E5M2 {
  using Scalar = uint8_t;
  static constexpr int kPerVector = 16;
  static constexpr uint32_t kMask = 0x7c7c7c7cu;
  static constexpr uint32_t kAdd = 0x04040404u;
  static constexpr uint32_t kFlags = 0x80808080u;
  __device__ static bool scalarBad(Scalar s) { return (s & 0x7cu) == 0x7cu; }
};
struct F8E4M3 {
  using Scalar = uint8_t;
  static constexpr int kPerVector = 16;
  static constexpr uint32_t kMask = 0x7f7f7f7fu;
  static constexpr uint32_t kAdd = 0x01010101u;
  static constexpr uint32_t kFlags = 0x80808080u;
  __device__ static bool scalarBad(Scalar s) { return (s & 0x7fu) == 0x7fu; }
};
// f64: the exponent lives in the high word of each element (words 1 and 3 of a vector, little endian); the
// low words are tested with a zero mask and addend, which never sets a flag.
struct F64 {
  using Scalar = unsigned long long;
  static constexpr int kPerVector = 2;
  static constexpr uint32_t kMask = 0x7ff00000u;
  static constexpr uint32_t kAdd = 0x00100000u;
  static constexpr uint32_t kFlags = 0x80000000u;
  __device__ static bool scalarBad(Scalar s) { return (s & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; }
};

template <typename T>
__device__ __forceinline__ uint32_t wordFlags(uint32_t w, bool highWord) {
  if constexpr (T::kPerVector == 2) {
    if (!highWord) return 0;
  }
  return ((w & T::kMask) + T::kAdd) & T::kFlags;
}

// Flag bits of the four words, in element order: bit 31 of word k for 32-bit types, bits 15 and 31 for
// 16-bit types, bits 7, 15, 23 and 31 for 8-bit types, bit 31 of words 1 and 3 for f64. Zero iff every
// element of the vector is finite.
template <typename T>
__device__ __forceinline__ uint32_t vectorFlags(const uint4& v) {
  return wordFlags<T>(v.x, false) | wordFlags<T>(v.y, true) | wordFlags<T>(v.z, false) |
         wordFlags<T>(v.w, true);
}

// Slow path for a vector that holds at least one non-finite element; `firstElement` is its first index.
// Not inlined: it is rare, and inlined its registers would count against the occupancy of the fast path.
struct Hits {
  unsigned long long count;
  unsigned long long first;
};

template <typename T>
__device__ __noinline__ Hits accountVector(uint4 v, unsigned long long firstElement) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  Hits h{0, ~0ull};
#pragma unroll
  for (int e = T::kPerVector - 1; e >= 0; --e) {  // backwards: the last hit is the smallest index
    bool hit;
    if constexpr (T::kPerVector == 2) {
      hit = wordFlags<T>(words[2 * e + 1], true) != 0;
    } else if constexpr (T::kPerVector == 4) {
      hit = wordFlags<T>(words[e], false) != 0;
    } else if constexpr (T::kPerVector == 8) {
      hit = (wordFlags<T>(words[e / 2], false) & (e % 2 == 0 ? 0x00008000u : 0x80000000u)) != 0;
    } else {
      hit = (wordFlags<T>(words[e / 4], false) & (0x80u << (8 * (e % 4)))) != 0;
    }
    if (hit) {
      ++h.count;
      h.first = firstElement + static_cast<unsigned long long>(e);
    }
  }
  return h;
}

using cuda_detail::loadStreaming;

__global__ void __launch_bounds__(32, 1) nanScanInitKernel(NanScanResult* out) {
  if (threadIdx.x == 0) {
    out->count = 0;
    out->firstIndex = ~0ull;
  }
}

// Elements [0, head) and [head + numVectors * kPerVector, count) are scalars (the unaligned head and tail,
// fewer than one vector each, checked by block 0); the rest are 16-byte vectors starting at element head.
// One block's share of one buffer's scan: block `block` of `blocks` (the grid, or the blocks a multi-buffer
// launch gave this buffer).
template <typename T>
__device__ __forceinline__ void scanBlock(const typename T::Scalar* __restrict__ elems,
                                          unsigned long long count, unsigned long long head,
                                          unsigned long long numVectors, unsigned block, unsigned blocks,
                                          unsigned shift, NanScanResult* __restrict__ out) {
  unsigned long long bad = 0;
  unsigned long long first = ~0ull;
  const uint4* vectors = reinterpret_cast<const uint4*>(elems + head);
  const unsigned long long stride = static_cast<unsigned long long>(blocks) * kScanThreads;
  unsigned long long i = static_cast<unsigned long long>(block) * kScanThreads + threadIdx.x;

  for (; i + (kUnroll - 1) * stride < numVectors; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = loadStreaming(vectors + i + u * stride);
    uint32_t flags[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) flags[u] = vectorFlags<T>(v[u]);
    if ((flags[0] | flags[1] | flags[2] | flags[3]) != 0) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        // Re-read (an L2 hit) rather than keep v live across the fast path: fewer registers, more warps.
        if (flags[u] != 0) {
          const Hits h = accountVector<T>(loadStreaming(vectors + i + u * stride),
                                          head + (i + u * stride) * T::kPerVector);
          bad += h.count;
          first = min(first, h.first);
        }
      }
    }
  }
  for (; i < numVectors; i += stride) {
    const uint4 v = loadStreaming(vectors + i);
    if (vectorFlags<T>(v) != 0) {
      const Hits h = accountVector<T>(v, head + i * T::kPerVector);
      bad += h.count;
      first = min(first, h.first);
    }
  }

  if (block == 0) {
    // Thread t < head takes head element t, the next threads take the tail elements in order.
    const unsigned long long tailBegin = head + numVectors * T::kPerVector;
    const unsigned long long index = threadIdx.x < head ? threadIdx.x : tailBegin + (threadIdx.x - head);
    if (index < count && T::scalarBad(elems[index])) {
      ++bad;
      first = min(first, index);
    }
  }

  // Only warps that found something pay for the reduction and the atomics.
  if (__any_sync(0xffffffffu, bad != 0)) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      bad += __shfl_xor_sync(0xffffffffu, bad, offset);
      first = min(first, __shfl_xor_sync(0xffffffffu, first, offset));
    }
    if ((threadIdx.x & 31u) == 0) {
      atomicAdd(&out->count, bad);
      atomicMin(&out->firstIndex, first >> shift);  // a complex scan's part index -> its element's
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kScanThreads, kScanMinBlocks)
    nanScanKernel(const typename T::Scalar* __restrict__ elems, unsigned long long count,
                  unsigned long long head, unsigned long long numVectors, unsigned shift,
                  NanScanResult* __restrict__ out) {
  scanBlock<T>(elems, count, head, numVectors, blockIdx.x, gridDim.x, shift, out);
}

// Many buffers of one dtype in one launch (nanScanManyDevice): the table travels as the kernel's parameter
// (like PyTorch's multi_tensor_apply), block b works on the span whose block range holds b.
constexpr int kMaxSpansPerLaunch = 64;
struct ScanEntry {
  const void* elems;
  unsigned long long count, head, numVectors;
  NanScanResult* out;
  unsigned blockBegin, blocks, shift;
};
struct ScanTable {
  ScanEntry e[kMaxSpansPerLaunch];
  int n;
};
static_assert(sizeof(ScanTable) <= 4000, "a kernel parameter is at most 4 KiB");

__global__ void __launch_bounds__(kMaxSpansPerLaunch, 1)
    nanScanInitManyKernel(const __grid_constant__ ScanTable t) {
  if (static_cast<int>(threadIdx.x) < t.n) {
    t.e[threadIdx.x].out->count = 0;
    t.e[threadIdx.x].out->firstIndex = ~0ull;
  }
}

template <typename T>
__global__ void __launch_bounds__(kScanThreads, kScanMinBlocks)
    nanScanManyKernel(const __grid_constant__ ScanTable t) {
  int lo = 0, hi = t.n - 1;  // the last entry whose blockBegin <= blockIdx.x
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.e[mid].blockBegin <= blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const ScanEntry& e = t.e[lo];
  scanBlock<T>(static_cast<const typename T::Scalar*>(e.elems), e.count, e.head, e.numVectors,
               blockIdx.x - e.blockBegin, e.blocks, e.shift, e.out);
}

// The dtypes the scan supports; the launcher dispatches on DataType to these.
template __global__ void nanScanKernel<F32>(const F32::Scalar*, unsigned long long, unsigned long long,
                                            unsigned long long, unsigned, NanScanResult*);
template __global__ void nanScanKernel<F64>(const F64::Scalar*, unsigned long long, unsigned long long,
                                            unsigned long long, unsigned, NanScanResult*);
template __global__ void nanScanKernel<F16>(const F16::Scalar*, unsigned long long, unsigned long long,
                                            unsigned long long, unsigned, NanScanResult*);
template __global__ void nanScanKernel<BF16>(const BF16::Scalar*, unsigned long long, unsigned long long,
                                             unsigned long long, unsigned, NanScanResult*);
template __global__ void nanScanKernel<F8E5M2>(const F8E5M2::Scalar*, unsigned long long, unsigned long long,
                                               unsigned long long, unsigned, NanScanResult*);
template __global__ void nanScanKernel<F8E4M3>(const F8E4M3::Scalar*, unsigned long long, unsigned long long,
                                               unsigned long long, unsigned, NanScanResult*);

// The split of a buffer into the 16-byte vectors of the fast path and the scalars around them.
template <typename T>
void vectorSplit(const void* data, size_t count, size_t* head, size_t* numVectors) {
  constexpr size_t kElemBytes = sizeof(typename T::Scalar);
  // Scalars before the first 16-byte boundary: fewer than a vector, like the tail, so block 0 covers both.
  const size_t misalign = reinterpret_cast<uintptr_t>(data) % 16;
  *head = std::min<size_t>(misalign == 0 ? 0 : (16 - misalign) / kElemBytes, count);
  *numVectors = (count - *head) / T::kPerVector;
  static_assert(2 * 16 <= kScanThreads, "block 0 covers head and tail with one element per thread");
}

// Blocks for a buffer of `numVectors` vectors: enough for kUnroll vectors per thread, at most `resident`.
size_t blocksFor(size_t numVectors, int resident) {
  const size_t perBlock = static_cast<size_t>(kScanThreads) * kUnroll;
  const size_t wanted = std::max<size_t>(1, (numVectors + perBlock - 1) / perBlock);
  return std::min<size_t>(wanted, static_cast<size_t>(resident));
}

template <typename T>
Status launchScan(const void* data, size_t count, unsigned shift, NanScanResult* out, cudaStream_t stream) {
  static cuda_detail::ResidentBlocks residency;
  size_t head = 0, numVectors = 0;
  vectorSplit<T>(data, count, &head, &numVectors);
  int resident = 0;
  RINGGUARD_RETURN_IF_ERROR(residency.get(
      nanScanKernel<T>, kScanThreads, 0, [](int) { return Status::ok(); }, &resident));
  const unsigned blocks = static_cast<unsigned>(blocksFor(numVectors, resident));
  nanScanKernel<T><<<blocks, kScanThreads, 0, stream>>>(static_cast<const typename T::Scalar*>(data), count,
                                                        head, numVectors, shift, out);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

// A span as the kernels see it: elements of a real type (a complex span as its parts, `shift` = 1 turning
// the first part's index into its element's).
struct RealSpan {
  const void* data;
  size_t count;
  DataType dtype;
  unsigned shift;
  NanScanResult* result;
};

// Up to kMaxSpansPerLaunch spans of one dtype: one launch initialises their results, one scans them all.
template <typename T>
Status launchScanMany(const RealSpan* const* spans, size_t n, cudaStream_t stream) {
  static cuda_detail::ResidentBlocks residency;
  int resident = 0;
  RINGGUARD_RETURN_IF_ERROR(residency.get(
      nanScanManyKernel<T>, kScanThreads, 0, [](int) { return Status::ok(); }, &resident));
  ScanTable table{};
  table.n = static_cast<int>(n);
  size_t blocks = 0;
  for (size_t i = 0; i < n; ++i) {
    ScanEntry& e = table.e[i];
    size_t head = 0, numVectors = 0;
    vectorSplit<T>(spans[i]->data, spans[i]->count, &head, &numVectors);
    e.elems = spans[i]->data;
    e.count = spans[i]->count;
    e.head = head;
    e.numVectors = numVectors;
    e.out = spans[i]->result;
    e.shift = spans[i]->shift;
    e.blockBegin = static_cast<unsigned>(blocks);
    e.blocks = static_cast<unsigned>(blocksFor(numVectors, resident));
    blocks += e.blocks;
  }
  nanScanInitManyKernel<<<1, kMaxSpansPerLaunch, 0, stream>>>(table);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  nanScanManyKernel<T><<<static_cast<unsigned>(blocks), kScanThreads, 0, stream>>>(table);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status checkScanArgs(const void* data, size_t count, DataType dtype, const NanScanResult* result,
                     const char* who) {
  if (!element_bits::holdsNonFinite(dtype)) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(who) + ": unsupported dtype " +
                      (isValid(dtype) ? dataTypeName(dtype) : "(invalid)") +
                      " (f32, f64, f16, bf16, c64, c128 and the float8 types only)");
  }
  if (result == nullptr)
    return Status(StatusCode::kInvalidArgument, std::string(who) + ": null result pointer");
  if (data == nullptr && count != 0)
    return Status(StatusCode::kInvalidArgument, std::string(who) + ": null data");
  // Every tensor's storage is element aligned; a pointer that is not is a caller bug, and the vector path
  // could not read it anyway.
  const size_t elemBytes = dataTypeSize(dtype);
  if (reinterpret_cast<uintptr_t>(data) % elemBytes != 0) {
    return Status(StatusCode::kInvalidArgument, std::string(who) +
                                                    ": data must be aligned to its element size (" +
                                                    std::to_string(elemBytes) + " bytes)");
  }
  return Status::ok();
}

// The dtype was checked (checkScanArgs): scanParts maps it, as for the host scan and the guard.
RealSpan realSpan(const void* data, size_t count, DataType dtype, NanScanResult* result) {
  DataType part = dtype;
  int parts = 1;
  element_bits::scanParts(dtype, &part, &parts);
  return RealSpan{data, count * size_t(parts), part, parts == 2 ? 1u : 0u, result};
}

}  // namespace

Status nanScanDevice(const void* data, size_t count, DataType dtype, NanScanResult* resultDevice,
                     cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkScanArgs(data, count, dtype, resultDevice, "nanScanDevice"));
  nanScanInitKernel<<<1, 32, 0, stream>>>(resultDevice);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  if (count == 0) return Status::ok();
  const RealSpan r = realSpan(data, count, dtype, resultDevice);
  switch (r.dtype) {
    case DataType::kFloat32:
      return launchScan<F32>(r.data, r.count, r.shift, r.result, stream);
    case DataType::kFloat64:
      return launchScan<F64>(r.data, r.count, r.shift, r.result, stream);
    case DataType::kFloat16:
      return launchScan<F16>(r.data, r.count, r.shift, r.result, stream);
    case DataType::kFloat8E5M2:
      return launchScan<F8E5M2>(r.data, r.count, r.shift, r.result, stream);
    case DataType::kFloat8E4M3:
      return launchScan<F8E4M3>(r.data, r.count, r.shift, r.result, stream);
    default:
      return launchScan<BF16>(r.data, r.count, r.shift, r.result, stream);
  }
}

Status nanScanManyDevice(const NanScanSpan* spans, size_t n, cudaStream_t stream) {
  if (spans == nullptr && n != 0)
    return Status(StatusCode::kInvalidArgument, "nanScanManyDevice: null spans");
  for (size_t i = 0; i < n; ++i) {
    Status st =
        checkScanArgs(spans[i].data, spans[i].count, spans[i].dtype, spans[i].result, "nanScanManyDevice");
    if (!st.isOk()) return Status(st.code(), st.message() + " (span " + std::to_string(i) + ")");
  }
  std::vector<RealSpan> real;
  real.reserve(n);
  for (size_t i = 0; i < n; ++i)
    real.push_back(realSpan(spans[i].data, spans[i].count, spans[i].dtype, spans[i].result));
  // Grouped by real dtype (one kernel each), in launches of up to kMaxSpansPerLaunch spans.
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                         DataType::kFloat8E5M2, DataType::kFloat8E4M3}) {
    std::vector<const RealSpan*> group;
    for (const RealSpan& r : real) {
      if (r.dtype == dtype) group.push_back(&r);
    }
    for (size_t base = 0; base < group.size(); base += kMaxSpansPerLaunch) {
      const size_t k = std::min<size_t>(kMaxSpansPerLaunch, group.size() - base);
      const RealSpan* const* chunk = group.data() + base;
      auto launch = [&]() -> Status {
        switch (dtype) {
          case DataType::kFloat32:
            return launchScanMany<F32>(chunk, k, stream);
          case DataType::kFloat64:
            return launchScanMany<F64>(chunk, k, stream);
          case DataType::kFloat16:
            return launchScanMany<F16>(chunk, k, stream);
          case DataType::kFloat8E5M2:
            return launchScanMany<F8E5M2>(chunk, k, stream);
          case DataType::kFloat8E4M3:
            return launchScanMany<F8E4M3>(chunk, k, stream);
          default:
            return launchScanMany<BF16>(chunk, k, stream);
        }
      };
      RINGGUARD_RETURN_IF_ERROR(launch());
    }
  }
  return Status::ok();
}

}  // namespace ringguard
