// Verify + reduce kernels of the device executor (docs/design/protocol.md, "Executors"), bit-identical to
// the host executor: checkSlice, makeTrailer / sealTrailer and reduceHost.
//
//  * verifyApplyKernel<Op>: every block first computes the verdict of the slot (thread 0, from the trailer in
//    device memory and the payload CRC crc32Device left in a device word), exactly like checkSlice, and
//    only when it is kOk reduces (dst = local op slot) or copies (dst = slot) its grid-stride share. Block 0
//    also writes the verdict (a byte in mapped pinned memory, a word in device memory). dst is therefore
//    never touched by a slice that failed, whatever the block scheduling.
//  * The data path is a pure stream: 16-byte vectors where dst, local and slot share their alignment
//    modulo 16, else the widest vector (8 or 4 bytes) they do share, else single elements; the elements
//    before dst's first vector boundary (head) and after the last whole vector (tail), fewer than one
//    vector each, are done by the first threads of the grid. kUnroll vectors per operand are in flight
//    per thread.
//  * verifyApplyCrcKernel<Op>: the same verify and apply, fused with the CRC-32 of what dst holds afterwards
//    (the segment loop of crc32_segments.cuh, one 1024-thread block per SM): each 16-byte piece of the
//    result is checksummed in registers as it is stored, so a forwarded slice needs no second read. It
//    needs dst, local and slot equally aligned modulo 16; verifyApplyCrcDevice falls back to the two
//    kernels otherwise. A block whose verdict is not kOk writes nothing and checksums dst as it is.
//  * A forwarded copy (all-gather) does not use the fused kernel: verifyCopyCrcDevice runs the plain copy
//    and then a CRC of dst that only runs after a bad verdict (crc32DeviceUnlessOk): after kOk the outgoing
//    CRC is the verified payload CRC, since dst holds exactly those bytes.
//  * verifySliceKernel: the verdict of a slice received in place (nothing to apply) and its forwarding
//    trailer; sealTrailerKernel / retagTrailerKernel: makeTrailer and sealTrailer on one thread, the trailer
//    CRC with slicing-by-4 tables built at compile time from crc32TableEntry (constant memory).
//
// The reduction arithmetic is that of reduceHost: the same expressions, with __fadd_rn-style intrinsics so
// that nothing is contracted, integer sums and products computed in the unsigned type (wrap), the avg
// divisor kept an int, std::min / std::max spelled out (y < x ? y : x, x < y ? y : x). f16 uses the
// hardware conversions, which are the IEEE round-to-nearest-even that floatToHalf / halfToFloat implement,
// except for NaN (and, going to f32, Inf), whose bits are built exactly as the host does; bf16 uses the
// host's bit manipulation as is.
//
// Everything the kernels compute per element or per trailer is __host__ __device__, so that it can be
// checked against the host reference without a GPU.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/crc32_combine.h"
#include "core/float16.h"
#include "core/reduce.h"
#include "cuda/crc32_segments.cuh"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/verify_reduce.h"

namespace ringguard {
namespace {

// ---- Launch geometry (scripts/regcheck.py reads the bounds from the __launch_bounds__ below) -----------
constexpr int kApplyThreads = 256;
constexpr int kApplyMinBlocks = 4;
constexpr int kTrailerThreads = 32;
constexpr int kUnroll = 4;  // vectors per operand in flight per thread
constexpr int kMaxVectorBytes = 16;
constexpr int kFusedThreads = 1024;  // verifyApplyCrcKernel: the CRC segment geometry
constexpr int kFusedMinBlocks = 1;   // 128 KiB of CRC tables in shared memory: one block per SM
constexpr int kFusedBatch = 1;       // pieces (16 bytes of each operand) per step, the next step's prefetched

static_assert(kFusedThreads == crc_segments::kThreads, "the fused kernel runs the CRC segment loop");
static_assert(kMaxVectorBytes == int(crc_segments::kPieceBytes), "a fused piece is one 16-byte vector");

static_assert(2 * kMaxVectorBytes <= kApplyThreads, "block 0 covers head and tail, one element per thread");

// `#pragma unroll` for the device pass only: the host compiler also sees the __host__ __device__ bodies.
#if defined(__CUDA_ARCH__)
#define RINGGUARD_UNROLL _Pragma("unroll")
#else
#define RINGGUARD_UNROLL
#endif

// ---- Bits and arithmetic shared by host and device -------------------------------------------------------

__host__ __device__ inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

__host__ __device__ inline float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// f16 <-> f32 as the host does it. On the device the conversion instructions are exact (f16 -> f32) and
// round to nearest even (f32 -> f16) for every finite value and for Inf; only the NaN (and, widening, the
// Inf) bit patterns are built by hand, with the host's formulas.
__host__ __device__ inline float halfToFloatHost(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7C00u) == 0x7C00u) return halfToFloat(h);  // Inf, NaN (payload kept)
  return __half2float(__ushort_as_half(h));
#else
  return halfToFloat(h);
#endif
}

__host__ __device__ inline uint16_t floatToHalfHost(float f) {
#if defined(__CUDA_ARCH__)
  if ((floatBits(f) & 0x7FFFFFFFu) > 0x7F800000u) return floatToHalf(f);  // NaN: quieted, payload kept
  return __half_as_ushort(__float2half_rn(f));
#else
  return floatToHalf(f);
#endif
}

// IEEE operations rounded to nearest even, never contracted into an FMA.
__host__ __device__ inline float addRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;
#endif
}
__host__ __device__ inline double addRn(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(x, y);
#else
  return x + y;
#endif
}
__host__ __device__ inline float mulRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}
__host__ __device__ inline double mulRn(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(x, y);
#else
  return x * y;
#endif
}
__host__ __device__ inline float divRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(x, y);
#else
  return x / y;
#endif
}
__host__ __device__ inline double divRn(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(x, y);
#else
  return x / y;
#endif
}

// addWrap / mulWrap of reduce.cc.
template <typename C>
__host__ __device__ inline C addWrap(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return C(U(U(x) + U(y)));
  } else {
    return addRn(x, y);
  }
}

template <typename C>
__host__ __device__ inline C mulWrap(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;  // no promotion to int
    return C(U(W(U(x)) * W(U(y))));
  } else {
    return mulRn(x, y);
  }
}

// C(sum / div) with an int divisor, as reduceHost's avg does: the usual arithmetic conversions.
template <typename C>
__host__ __device__ inline C divideByInt(C sum, int div) {
  if constexpr (std::is_integral_v<C>) {
    return C(sum / div);
  } else {
    return divRn(sum, C(div));
  }
}

// ---- Element types (load to the compute type, store back) ------------------------------------------------

template <typename T>
struct NativeConv {
  using Elem = T;
  using Compute = T;
  __host__ __device__ static T load(T v) { return v; }
  __host__ __device__ static T store(T v) { return v; }
};
struct HalfConv {
  using Elem = uint16_t;
  using Compute = float;
  __host__ __device__ static float load(uint16_t v) { return halfToFloatHost(v); }
  __host__ __device__ static uint16_t store(float v) { return floatToHalfHost(v); }
};
struct BFloatConv {
  using Elem = uint16_t;
  using Compute = float;
  __host__ __device__ static float load(uint16_t v) { return bf16ToFloat(v); }
  __host__ __device__ static uint16_t store(float v) { return floatToBf16(v); }
};

// ---- Operations (x: the local operand, y: the slot; reduceHost's a and b) --------------------------------

// What an operation needs besides its operands: avg's divisor, premul_sum's factor (premulScalar: already
// rounded to the element type, so converting it to the compute type is exact).
struct OpArg {
  int nranks;
  double scalar;
};

struct SumFn {
  template <typename C>
  __host__ __device__ static C apply(C x, C y, const OpArg&) {
    return addWrap(x, y);
  }
};
struct ProdFn {
  template <typename C>
  __host__ __device__ static C apply(C x, C y, const OpArg&) {
    return mulWrap(x, y);
  }
};
struct MinFn {  // std::min(x, y)
  template <typename C>
  __host__ __device__ static C apply(C x, C y, const OpArg&) {
    return (y < x) ? y : x;
  }
};
struct MaxFn {  // std::max(x, y)
  template <typename C>
  __host__ __device__ static C apply(C x, C y, const OpArg&) {
    return (x < y) ? y : x;
  }
};
struct AvgFinalFn {  // the final step of avg: the sum divided by nranks
  template <typename C>
  __host__ __device__ static C apply(C x, C y, const OpArg& arg) {
    return divideByInt(addWrap(x, y), arg.nranks);
  }
};
// premul_sum: x (this rank's input) times the factor plus y, a partial sum of scaled inputs; at the first
// step y is the sending rank's input and is scaled too (reduceHost's firstStep). Floating types only.
template <bool kFirst>
struct PremulFn {
  template <typename C>
  __host__ __device__ static C apply(C x, C y, const OpArg& arg) {
    const C s = C(arg.scalar);
    if constexpr (kFirst) {
      return addRn(mulRn(x, s), mulRn(y, s));
    } else {
      return addRn(mulRn(x, s), y);
    }
  }
};
// Bitwise ops act on bits alone: every integer dtype (and bool) runs them on bytes, a vector a word at a
// time.
struct BandFn {
  template <typename U>
  __host__ __device__ static U apply(U x, U y) {
    return U(x & y);
  }
};
struct BorFn {
  template <typename U>
  __host__ __device__ static U apply(U x, U y) {
    return U(x | y);
  }
};
struct BxorFn {
  template <typename U>
  __host__ __device__ static U apply(U x, U y) {
    return U(x ^ y);
  }
};

// An apply operation: what one element of dst becomes.
template <typename Conv, typename Fn>
struct ReduceOpT {
  using Elem = typename Conv::Elem;
  static constexpr bool kReadsLocal = true;
  static constexpr bool kWordwise = false;
  __host__ __device__ static Elem element(Elem x, Elem y, const OpArg& arg) {
    return Conv::store(Fn::template apply<typename Conv::Compute>(Conv::load(x), Conv::load(y), arg));
  }
};
template <typename Fn>
struct BitwiseOpT {  // dst = local op slot on bytes; whole 32-bit words inside a vector
  using Elem = uint8_t;
  static constexpr bool kReadsLocal = true;
  static constexpr bool kWordwise = true;
  __host__ __device__ static Elem element(Elem x, Elem y, const OpArg&) { return Fn::apply(x, y); }
  __host__ __device__ static uint32_t word(uint32_t x, uint32_t y) { return Fn::apply(x, y); }
};
struct CopyOpT {  // all-gather: dst = slot, moved as bytes
  using Elem = uint8_t;
  static constexpr bool kReadsLocal = false;
  static constexpr bool kWordwise = false;
  __host__ __device__ static Elem element(Elem, Elem y, const OpArg&) { return y; }
};

// ---- The data path -----------------------------------------------------------------------------------

// Element <-> raw bits (the unsigned integer of the same width).
template <typename E>
__host__ __device__ inline E fromBits(uint64_t bits) {
  if constexpr (std::is_same_v<E, float>) {
    return bitsFloat(uint32_t(bits));
  } else if constexpr (std::is_same_v<E, double>) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double(static_cast<long long>(bits));
#else
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
#endif
  } else {
    return static_cast<E>(bits);  // integers (and the 16-bit patterns of f16 / bf16): two's complement
  }
}

template <typename E>
__host__ __device__ inline uint64_t toBits(E v) {
  if constexpr (std::is_same_v<E, float>) {
    return floatBits(v);
  } else if constexpr (std::is_same_v<E, double>) {
#if defined(__CUDA_ARCH__)
    return static_cast<uint64_t>(__double_as_longlong(v));
#else
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return u;
#endif
  } else {
    using U = std::make_unsigned_t<E>;
    return static_cast<U>(v);
  }
}

// A vector of V bytes (16, 8 or 4) held as 32-bit words, so that narrow elements do not each take a
// register: element k of width sizeof(E) is extracted and inserted with shifts.
template <int V>
struct Words {
  uint32_t w[V / 4];
};

template <int V>
__host__ __device__ inline Words<V> loadWords(const void* base, uint64_t j) {
  Words<V> r;
  if constexpr (V == 16) {
    const uint4 v = static_cast<const uint4*>(base)[j];
    r.w[0] = v.x;
    r.w[1] = v.y;
    r.w[2] = v.z;
    r.w[3] = v.w;
  } else if constexpr (V == 8) {
    const uint2 v = static_cast<const uint2*>(base)[j];
    r.w[0] = v.x;
    r.w[1] = v.y;
  } else {
    r.w[0] = static_cast<const uint32_t*>(base)[j];
  }
  return r;
}

template <int V>
__host__ __device__ inline void storeWords(void* base, uint64_t j, const Words<V>& r) {
  if constexpr (V == 16) {
    static_cast<uint4*>(base)[j] = make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
  } else if constexpr (V == 8) {
    static_cast<uint2*>(base)[j] = make_uint2(r.w[0], r.w[1]);
  } else {
    static_cast<uint32_t*>(base)[j] = r.w[0];
  }
}

template <typename E, int V>
__host__ __device__ inline E getElement(const Words<V>& v, int k) {
  if constexpr (sizeof(E) == 8) {
    return fromBits<E>((uint64_t(v.w[2 * k + 1]) << 32) | v.w[2 * k]);
  } else if constexpr (sizeof(E) == 4) {
    return fromBits<E>(v.w[k]);
  } else {
    constexpr int kPerWord = 4 / int(sizeof(E));
    constexpr int kBits = 8 * int(sizeof(E));
    constexpr uint32_t kMask = (1u << kBits) - 1;
    return fromBits<E>((v.w[k / kPerWord] >> ((k % kPerWord) * kBits)) & kMask);
  }
}

template <typename E, int V>
__host__ __device__ inline void setElement(Words<V>& v, int k, E e) {
  const uint64_t bits = toBits(e);
  if constexpr (sizeof(E) == 8) {
    v.w[2 * k] = uint32_t(bits);
    v.w[2 * k + 1] = uint32_t(bits >> 32);
  } else if constexpr (sizeof(E) == 4) {
    v.w[k] = uint32_t(bits);
  } else {
    constexpr int kPerWord = 4 / int(sizeof(E));
    constexpr int kBits = 8 * int(sizeof(E));
    constexpr uint32_t kMask = (1u << kBits) - 1;
    const int shift = (k % kPerWord) * kBits;
    v.w[k / kPerWord] = (v.w[k / kPerWord] & ~(kMask << shift)) | ((uint32_t(bits) & kMask) << shift);
  }
}

// What one launch moves. Elements [0, head) and [head + vectors * (vecBytes / elem), count) are single
// elements; in between lie `vectors` vectors of vecBytes, aligned in dst, local and slot alike. vecBytes
// equal to the element size means single elements throughout (head 0, vectors = count).
struct ApplyParams {
  void* dst;
  const void* local;
  const void* slot;
  uint64_t count;
  uint64_t head;
  uint64_t vectors;
  int vecBytes;
  OpArg arg;
};

// One element: dst[i] = local[i] op slot[i] (or slot[i]).
template <typename Op>
__host__ __device__ inline void applyElement(const ApplyParams& p, uint64_t i) {
  using E = typename Op::Elem;
  E x{};
  if constexpr (Op::kReadsLocal) x = static_cast<const E*>(p.local)[i];
  static_cast<E*>(p.dst)[i] = Op::element(x, static_cast<const E*>(p.slot)[i], p.arg);
}

// Single elements, grid-stride, kUnroll in flight (vecBytes == element size).
template <typename Op>
__host__ __device__ inline void applyScalars(const ApplyParams& p, uint64_t tid, uint64_t nthreads) {
  using E = typename Op::Elem;
  const E* local = static_cast<const E*>(p.local);
  const E* slot = static_cast<const E*>(p.slot);
  E* dst = static_cast<E*>(p.dst);
  for (uint64_t i = tid; i < p.count; i += nthreads * kUnroll) {
    E x[kUnroll] = {};
    E y[kUnroll] = {};
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.count) {
        y[u] = slot[j];
        if constexpr (Op::kReadsLocal) x[u] = local[j];
      }
    }
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.count) dst[j] = Op::element(x[u], y[u], p.arg);
    }
  }
}

// One vector of the result: element-wise local op slot (the slot itself for a copy).
template <typename Op, int V>
__host__ __device__ inline Words<V> combineWords(const Words<V>& x, Words<V> y, const OpArg& arg) {
  using E = typename Op::Elem;
  if constexpr (Op::kWordwise) {
    RINGGUARD_UNROLL
    for (int k = 0; k < V / 4; ++k) y.w[k] = Op::word(x.w[k], y.w[k]);
  } else if constexpr (Op::kReadsLocal) {
    RINGGUARD_UNROLL
    for (int k = 0; k < V / int(sizeof(E)); ++k) {
      setElement<E, V>(y, k, Op::element(getElement<E, V>(x, k), getElement<E, V>(y, k), arg));
    }
  }
  return y;
}

// Elements [0, head) and the tail after the last whole vector, by global threads tid < head + tail.
template <typename Op>
__host__ __device__ inline void applyHeadTail(const ApplyParams& p, uint64_t tid) {
  const uint64_t tailBegin = p.head + p.vectors * (uint64_t(p.vecBytes) / sizeof(typename Op::Elem));
  if (tid < p.head) {
    applyElement<Op>(p, tid);
  } else if (tid - p.head < p.count - tailBegin) {
    applyElement<Op>(p, tailBegin + (tid - p.head));
  }
}

// V-byte vectors (V > element size), grid-stride, kUnroll per operand in flight; head and tail by the
// first threads of the grid.
template <typename Op, int V>
__host__ __device__ inline void applyVectors(const ApplyParams& p, uint64_t tid, uint64_t nthreads) {
  using E = typename Op::Elem;
  applyHeadTail<Op>(p, tid);

  void* d = static_cast<E*>(p.dst) + p.head;
  const void* l = Op::kReadsLocal ? static_cast<const E*>(p.local) + p.head : nullptr;
  const void* s = static_cast<const E*>(p.slot) + p.head;
  for (uint64_t i = tid; i < p.vectors; i += nthreads * kUnroll) {
    Words<V> x[kUnroll] = {};
    Words<V> y[kUnroll] = {};
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.vectors) {
        y[u] = loadWords<V>(s, j);
        if constexpr (Op::kReadsLocal) x[u] = loadWords<V>(l, j);
      }
    }
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.vectors) storeWords<V>(d, j, combineWords<Op, V>(x[u], y[u], p.arg));
    }
  }
}

// The share of global thread `tid` of `nthreads`: dispatches on the (grid-uniform) vector width.
template <typename Op>
__host__ __device__ inline void applyShare(const ApplyParams& p, uint64_t tid, uint64_t nthreads) {
  constexpr int E = int(sizeof(typename Op::Elem));
  if constexpr (E < 16) {
    if (p.vecBytes == 16) return applyVectors<Op, 16>(p, tid, nthreads);
  }
  if constexpr (E < 8) {
    if (p.vecBytes == 8) return applyVectors<Op, 8>(p, tid, nthreads);
  }
  if constexpr (E < 4) {
    if (p.vecBytes == 4) return applyVectors<Op, 4>(p, tid, nthreads);
  }
  applyScalars<Op>(p, tid, nthreads);
}

// Vector width and head / vector count for elements of `elemBytes` at dst / local / slot (local null for a
// copy). All three pointers are element aligned.
ApplyParams planApply(void* dst, const void* local, const void* slot, size_t count, size_t elemBytes,
                      OpArg arg) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t l = reinterpret_cast<uintptr_t>(local);
  const uintptr_t s = reinterpret_cast<uintptr_t>(slot);
  // The widest of 16, 8 and 4 bytes at which the three pointers are equally misaligned, else single
  // elements (2-byte vectors would only serve u8, and only in that odd case: not worth an instantiation).
  size_t v = kMaxVectorBytes;
  while (v >= 4 && v > elemBytes && ((d % v) != (s % v) || (local != nullptr && (d % v) != (l % v)))) v /= 2;
  if (v < 4 || v <= elemBytes) v = elemBytes;
  ApplyParams p{};
  p.dst = dst;
  p.local = local;
  p.slot = slot;
  p.count = count;
  p.vecBytes = static_cast<int>(v);
  p.arg = arg;
  p.head = std::min<uint64_t>(((v - d % v) % v) / elemBytes, count);
  p.vectors = (count - p.head) / (v / elemBytes);
  return p;
}

// ---- Trailer CRC: slicing-by-4, tables at compile time -----------------------------------------------

struct TrailerCrcTables {
  uint32_t t[4][256];  // t[k][b]: the register after byte b followed by k zero bytes, from 0
};

__host__ __device__ constexpr TrailerCrcTables makeTrailerCrcTables() {
  TrailerCrcTables s{};
  for (uint32_t b = 0; b < 256; ++b) s.t[0][b] = crc32TableEntry(b);
  for (int k = 1; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) s.t[k][b] = (s.t[k - 1][b] >> 8) ^ s.t[0][s.t[k - 1][b] & 0xffu];
  }
  return s;
}

constexpr TrailerCrcTables kTrailerCrcHost = makeTrailerCrcTables();
static_assert(kTrailerCrcHost.t[0][1] == 0x77073096u, "standard CRC-32 table");
__constant__ TrailerCrcTables kTrailerCrcDevice = makeTrailerCrcTables();

static_assert(sizeof(Trailer) == 40 && offsetof(Trailer, trailerCrc) == 36, "trailer wire layout");

// CRC-32 of the first 36 bytes of `t` (the nine little-endian words before trailerCrc).
__host__ __device__ inline uint32_t trailerBodyCrc(const Trailer& t) {
#if defined(__CUDA_ARCH__)
  const TrailerCrcTables& tab = kTrailerCrcDevice;
#else
  const TrailerCrcTables& tab = kTrailerCrcHost;
#endif
  const uint32_t words[9] = {t.magic,
                             t.payloadCrc,
                             uint32_t(t.seq),
                             uint32_t(t.seq >> 32),
                             t.step,
                             t.slice,
                             t.column,
                             t.payloadBytes,
                             uint32_t(t.attempt) | (uint32_t(t.flags) << 16)};
  uint32_t c = 0xFFFFFFFFu;
  RINGGUARD_UNROLL
  for (int w = 0; w < 9; ++w) {
    c ^= words[w];
    c = tab.t[3][c & 0xffu] ^ tab.t[2][(c >> 8) & 0xffu] ^ tab.t[1][(c >> 16) & 0xffu] ^ tab.t[0][c >> 24];
  }
  return c ^ 0xFFFFFFFFu;
}

// makeTrailer of trailer.cc.
__host__ __device__ inline Trailer makeTrailerHD(const SliceId& id, uint32_t payloadCrc, uint16_t flags) {
  Trailer t{};
  t.magic = kTrailerMagic;
  t.payloadCrc = payloadCrc;
  t.seq = id.seq;
  t.step = id.step;
  t.slice = id.slice;
  t.column = id.column;
  t.payloadBytes = id.payloadBytes;
  t.attempt = id.attempt;
  t.flags = flags;
  t.trailerCrc = trailerBodyCrc(t);
  return t;
}

// checkSlice of trailer.cc (checkTrailer first, then the payload CRC, then the poisoned flag).
__host__ __device__ inline SliceCheck checkSliceHD(const Trailer& t, const SliceId& e, uint32_t crc) {
  if (t.magic != kTrailerMagic && (t.magic & 0x00FFFFFFu) == kTrailerMagicFamily &&
      t.trailerCrc == trailerBodyCrc(t))
    return SliceCheck::kVersionSkew;  // isTrailerVersionSkew
  if (t.magic != kTrailerMagic || t.trailerCrc != trailerBodyCrc(t)) return SliceCheck::kMalformed;
  if (t.seq != e.seq || t.step != e.step || t.slice != e.slice || t.column != e.column ||
      t.attempt != e.attempt) {
    return SliceCheck::kStale;
  }
  if (t.payloadBytes != e.payloadBytes) return SliceCheck::kSizeMismatch;
  if ((t.flags & ~kTrailerPoisoned) != 0) return SliceCheck::kMalformed;
  if (t.payloadCrc != crc) return SliceCheck::kCorrupt;
  if (t.flags & kTrailerPoisoned) return SliceCheck::kPoisoned;
  return SliceCheck::kOk;
}

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
    verdict = checkSliceHD(t, a.expected, *a.payloadCrc);
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

struct SealArgs {
  SliceId id;
  const uint32_t* crc;
  const uint32_t* verdictWord;  // may be null: flags 0
  Trailer* out;
};

__global__ void __launch_bounds__(kTrailerThreads, 1) sealTrailerKernel(const __grid_constant__ SealArgs a) {
  if (threadIdx.x != 0) return;
  const uint16_t flags =
      (a.verdictWord != nullptr && *a.verdictWord != static_cast<uint32_t>(SliceCheck::kOk))
          ? kTrailerPoisoned
          : uint16_t(0);
  *a.out = makeTrailerHD(a.id, *a.crc, flags);
}

// verifyInPlaceDevice: the verdict of bytes verified where they lie, and the trailer forwarding them.
struct VerifyArgs {
  const Trailer* trailer;
  const uint32_t* payloadCrc;
  SliceId expected;
  uint8_t* verdictByte;   // may be null
  uint32_t* verdictWord;  // may be null
  SliceId next;
  Trailer* sealOut;  // may be null
};

__global__ void __launch_bounds__(kTrailerThreads, 1)
    verifySliceKernel(const __grid_constant__ VerifyArgs a) {
  if (threadIdx.x != 0) return;
  const Trailer t = *a.trailer;
  const uint32_t crc = *a.payloadCrc;
  const SliceCheck verdict = checkSliceHD(t, a.expected, crc);
  if (a.verdictByte != nullptr) *a.verdictByte = static_cast<uint8_t>(verdict);
  if (a.verdictWord != nullptr) *a.verdictWord = static_cast<uint32_t>(verdict);
  if (a.sealOut != nullptr) {
    *a.sealOut = makeTrailerHD(a.next, crc, verdict == SliceCheck::kOk ? uint16_t(0) : kTrailerPoisoned);
  }
}

__global__ void __launch_bounds__(kTrailerThreads, 1) retagTrailerKernel(Trailer* t, uint16_t attempt) {
  if (threadIdx.x != 0) return;
  Trailer v = *t;
  v.attempt = attempt;
  v.trailerCrc = trailerBodyCrc(v);
  *t = v;
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

// Calls launch(Tag<Op>{}) with the apply operation of (dtype, op, finalStep).
template <typename Op>
struct Tag {
  using type = Op;
};

// What a reduction of (dtype, op) runs on: bitwise ops on bytes, complex dtypes on their real parts, every
// other dtype on its elements.
struct ReduceLayout {
  size_t elemBytes;
  size_t perElement;  // kernel elements per dtype element
};
ReduceLayout reduceLayout(DataType dtype, ReduceOp op) {
  const size_t size = dataTypeSize(dtype);
  const ReduceOp base = baseOp(op);
  if (base == ReduceOp::kBand || base == ReduceOp::kBor || base == ReduceOp::kBxor) return {1, size};
  if (isComplexType(dtype)) return {size / 2, 2};
  return {size, 1};
}

template <typename Conv, typename Launch>
Status dispatchOp(ReduceOp op, bool finalStep, bool firstStep, Launch&& launch) {
  switch (baseOp(op)) {
    case ReduceOp::kSum:
      return launch(Tag<ReduceOpT<Conv, SumFn>>{});
    case ReduceOp::kProd:
      return launch(Tag<ReduceOpT<Conv, ProdFn>>{});
    case ReduceOp::kMin:
      return launch(Tag<ReduceOpT<Conv, MinFn>>{});
    case ReduceOp::kMax:
      return launch(Tag<ReduceOpT<Conv, MaxFn>>{});
    case ReduceOp::kAvg:
      if (finalStep) return launch(Tag<ReduceOpT<Conv, AvgFinalFn>>{});
      return launch(Tag<ReduceOpT<Conv, SumFn>>{});
    case ReduceOp::kPremulSum:
      if constexpr (std::is_floating_point_v<typename Conv::Compute>) {
        if (firstStep) return launch(Tag<ReduceOpT<Conv, PremulFn<true>>>{});
        return launch(Tag<ReduceOpT<Conv, PremulFn<false>>>{});
      }
      break;
    default:
      break;
  }
  return Status(StatusCode::kInvalidArgument,
                std::string("op ") + reduceOpName(op) + " has no device kernel here");
}

// Calls launch(Tag<Op>{}) with the apply operation of (dtype, op, finalStep, firstStep); the caller checked
// reduceSupported(dtype, op) and planned the operands with reduceLayout.
template <typename Launch>
Status dispatchReduce(DataType dtype, ReduceOp op, bool finalStep, bool firstStep, Launch&& launch) {
  switch (baseOp(op)) {
    case ReduceOp::kBand:
      return launch(Tag<BitwiseOpT<BandFn>>{});
    case ReduceOp::kBor:
      return launch(Tag<BitwiseOpT<BorFn>>{});
    case ReduceOp::kBxor:
      return launch(Tag<BitwiseOpT<BxorFn>>{});
    default:
      break;
  }
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kComplex64:
      return dispatchOp<NativeConv<float>>(op, finalStep, firstStep, launch);
    case DataType::kFloat64:
    case DataType::kComplex128:
      return dispatchOp<NativeConv<double>>(op, finalStep, firstStep, launch);
    case DataType::kFloat16:
      return dispatchOp<HalfConv>(op, finalStep, firstStep, launch);
    case DataType::kBFloat16:
      return dispatchOp<BFloatConv>(op, finalStep, firstStep, launch);
    case DataType::kInt32:
      return dispatchOp<NativeConv<int32_t>>(op, finalStep, firstStep, launch);
    case DataType::kInt64:
      return dispatchOp<NativeConv<int64_t>>(op, finalStep, firstStep, launch);
    case DataType::kUint8:
      return dispatchOp<NativeConv<uint8_t>>(op, finalStep, firstStep, launch);
    case DataType::kInt16:
      return dispatchOp<NativeConv<int16_t>>(op, finalStep, firstStep, launch);
    case DataType::kInt8:
      switch (baseOp(op)) {
        case ReduceOp::kMin:
          return launch(Tag<ReduceOpT<NativeConv<int8_t>, MinFn>>{});
        case ReduceOp::kMax:
          return launch(Tag<ReduceOpT<NativeConv<int8_t>, MaxFn>>{});
        case ReduceOp::kAvg:
          if (finalStep) return launch(Tag<ReduceOpT<NativeConv<int8_t>, AvgFinalFn>>{});
          break;
        default:
          break;
      }
      return dispatchOp<NativeConv<uint8_t>>(op, finalStep, firstStep, launch);  // wrapping sum / product
    case DataType::kBool: {
      // Bytes 0 and 1: sum is their max (or), product their min (and), as reduceHost does.
      const ReduceOp base = baseOp(op);
      const ReduceOp u8op = base == ReduceOp::kSum    ? ReduceOp::kMax
                            : base == ReduceOp::kProd ? ReduceOp::kMin
                                                      : base;
      return dispatchOp<NativeConv<uint8_t>>(u8op, finalStep, firstStep, launch);
    }
    default:
      break;
  }
  return Status(StatusCode::kInvalidArgument,
                std::string("dtype ") + dataTypeName(dtype) + " does not reduce");
}

// Argument checks shared by verifyApplyDevice and reduceDevice; `what` names the caller.
Status checkOperands(const char* what, DataType dtype, ReduceOp op, bool reduce, const void* dst,
                     const void* local, const void* slot, size_t count, int nranks) {
  if (!isValid(dtype)) return Status(StatusCode::kInvalidArgument, std::string(what) + ": invalid dtype");
  if (reduce && !isValid(op)) return Status(StatusCode::kInvalidArgument, std::string(what) + ": invalid op");
  if (reduce && !reduceSupported(dtype, op)) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": op " + reduceOpName(op) +
                                                    " does not reduce dtype " + dataTypeName(dtype));
  }
  if (reduce && nranks < 1) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + ": nranks must be >= 1, got " + std::to_string(nranks));
  }
  const size_t elemBytes = dataTypeSize(dtype);
  if (count > (~size_t(0)) / elemBytes) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": element count overflows");
  }
  if (count != 0 && (dst == nullptr || slot == nullptr || (reduce && local == nullptr))) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": null buffer");
  }
  // A reduction reads its layout's elements (complex: one part); a copy moves whole elements.
  const size_t alignBytes = reduce ? reduceLayout(dtype, op).elemBytes : elemBytes;
  const auto misaligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % alignBytes != 0; };
  if (misaligned(dst) || misaligned(slot) || (reduce && misaligned(local))) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": buffers must be aligned to their " +
                                                    "element size (" + std::to_string(alignBytes) +
                                                    " bytes)");
  }
  return Status::ok();
}

// The kernel arguments of `a` (checked by the caller), with the widest vectors its pointers allow.
ApplyKernelArgs applyArgs(const DeviceApply& a) {
  ApplyKernelArgs args{};
  args.trailer = a.slotTrailer;
  args.payloadCrc = a.payloadCrc;
  args.expected = a.expected;
  args.verdictByte = a.verdictByte;
  args.verdictWord = a.verdictWord;
  const size_t elemBytes = dataTypeSize(a.dtype);
  const OpArg arg{a.nranks, premulScalar(a.dtype, premulFactor(a.op))};
  if (a.reduce) {
    const ReduceLayout l = reduceLayout(a.dtype, a.op);
    args.p = planApply(a.dst, a.local, a.slot, a.count * l.perElement, l.elemBytes, arg);
  } else {
    args.p = planApply(a.dst, nullptr, a.slot, a.count * elemBytes, 1, arg);  // as bytes
  }
  return args;
}

// Nothing is forwarded into step 0: its slot holds the sender's input (premul_sum scales it too).
bool firstStepOf(const DeviceApply& a) { return a.expected.step == 0; }

Status checkApply(const char* what, const DeviceApply& a) {
  if (a.slotTrailer == nullptr || a.payloadCrc == nullptr) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": null trailer or payload CRC pointer");
  }
  return checkOperands(what, a.dtype, a.op, a.reduce, a.dst, a.local, a.slot, a.count, a.nranks);
}

}  // namespace

Status verifyApplyDevice(const DeviceApply& a, cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkApply("verifyApplyDevice", a));
  const ApplyKernelArgs args = applyArgs(a);
  if (!a.reduce) return launchApply<CopyOpT>(args, stream);
  return dispatchReduce(a.dtype, a.op, a.finalStep, firstStepOf(a),
                        [&](auto tag) { return launchApply<typename decltype(tag)::type>(args, stream); });
}

bool verifyApplyCrcFuses(const DeviceApply& a) { return applyArgs(a).p.vecBytes == kMaxVectorBytes; }

Status verifyApplyCrcDevice(const DeviceApply& a, uint32_t* dstCrcDevice, void* scratch, size_t scratchBytes,
                            cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkApply("verifyApplyCrcDevice", a));
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
  const ApplyKernelArgs args = applyArgs(a);
  if (args.p.vecBytes != kMaxVectorBytes) {  // not equally aligned modulo 16: two passes
    RINGGUARD_RETURN_IF_ERROR(verifyApplyDevice(a, stream));
    return crc32Device(a.dst, bytes, dstCrcDevice, scratch, scratchBytes, stream);
  }
  if (!a.reduce) return launchApplyCrc<CopyOpT>(args, dstCrcDevice, scratch, stream);
  return dispatchReduce(a.dtype, a.op, a.finalStep, firstStepOf(a), [&](auto tag) {
    return launchApplyCrc<typename decltype(tag)::type>(args, dstCrcDevice, scratch, stream);
  });
}

Status verifyCopyCrcDevice(const DeviceApply& a, uint32_t* outCrcDevice, void* scratch, size_t scratchBytes,
                           cudaStream_t stream) {
  RINGGUARD_RETURN_IF_ERROR(checkApply("verifyCopyCrcDevice", a));
  if (a.reduce || a.verdictWord == nullptr || outCrcDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "verifyCopyCrcDevice: a copy (reduce false) with a verdict word and a CRC output");
  }
  RINGGUARD_RETURN_IF_ERROR(verifyApplyDevice(a, stream));
  // Stream order: the apply kernel's block 0 has written the verdict word when this reads it.
  return crc32DeviceUnlessOk(a.dst, a.count * dataTypeSize(a.dtype), a.verdictWord, a.payloadCrc,
                             outCrcDevice, scratch, scratchBytes, stream);
}

Status verifyInPlaceDevice(const DeviceVerify& v, cudaStream_t stream) {
  if (v.slotTrailer == nullptr || v.payloadCrc == nullptr) {
    return Status(StatusCode::kInvalidArgument, "verifyInPlaceDevice: null trailer or payload CRC pointer");
  }
  VerifyArgs args{};
  args.trailer = v.slotTrailer;
  args.payloadCrc = v.payloadCrc;
  args.expected = v.expected;
  args.verdictByte = v.verdictByte;
  args.verdictWord = v.verdictWord;
  args.next = v.next;
  args.sealOut = v.sealOut;
  verifySliceKernel<<<1, kTrailerThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status sealTrailerDevice(const SliceId& id, const uint32_t* crcDevice, const uint32_t* verdictWordDevice,
                         Trailer* outDevice, cudaStream_t stream) {
  if (crcDevice == nullptr || outDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument, "sealTrailerDevice: null CRC or output pointer");
  }
  SealArgs args{};
  args.id = id;
  args.crc = crcDevice;
  args.verdictWord = verdictWordDevice;
  args.out = outDevice;
  sealTrailerKernel<<<1, kTrailerThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status retagTrailerDevice(Trailer* trailerDevice, uint16_t attempt, cudaStream_t stream) {
  if (trailerDevice == nullptr)
    return Status(StatusCode::kInvalidArgument, "retagTrailerDevice: null trailer");
  retagTrailerKernel<<<1, kTrailerThreads, 0, stream>>>(trailerDevice, attempt);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status reduceDevice(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                    bool finalStep, int nranks, cudaStream_t stream, bool firstStep) {
  RINGGUARD_RETURN_IF_ERROR(checkOperands("reduceDevice", dtype, op, true, dst, a, b, count, nranks));
  ApplyKernelArgs args{};
  const ReduceLayout l = reduceLayout(dtype, op);
  args.p = planApply(dst, a, b, count * l.perElement, l.elemBytes,
                     OpArg{nranks, premulScalar(dtype, premulFactor(op))});
  return dispatchReduce(dtype, op, finalStep, firstStep,
                        [&](auto tag) { return launchApply<typename decltype(tag)::type>(args, stream); });
}

}  // namespace ringguard
