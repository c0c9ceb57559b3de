// The one-shot verified allreduce over peer windows (docs/design/protocol.md, "The one-sided protocol";
// launcher contract in peer_allreduce.h).
//
// One warp owns a chunk (32 lanes x kLaneVectors 16-byte vectors). Publish: load the input, store it into
// this rank's window, CRC it in registers (each lane its pieces, merged across the warp with the CRC
// combine math of core/crc32_combine.h), write {crc, fingerprint}, fence, then the epoch with release order.
// Read: for every rank in order 0..N-1, wait (with a deadline) for its chunk's epoch, load the bytes
// uncached, CRC them, compare, re-read on a mismatch, and reduce; the sum is written to the output.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/corruption_plan.h"
#include "core/crc32_combine.h"
#include "core/element_ops.h"
#include "core/reduce.h"
#include "core/reduce_dispatch.h"
#include "cuda/cuda_check.h"
#include "cuda/peer_allreduce.h"
#include "ringguard/core/crc32.h"

namespace ringguard {
namespace peer {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPieces = 32 * kLaneVectors;
constexpr uint32_t kSpinCheckEvery = 256;

// t[j][b]: the CRC register (zero initial value) after byte b followed by j zero bytes, so a 16-byte piece's
// register is the XOR of 16 independent lookups (slicing-by-16): no chain of dependent loads.
struct SliceTables {
  uint32_t t[16][256];
};
struct CrcConstants {
  uint32_t pieceShift[kPieces];  // x^(128 * (kPieces - 1 - i)): moves piece i's register to the chunk's end
  uint32_t init;                 // 0xFFFFFFFF advanced over a whole chunk (the CRC's initial value)
};

__host__ __device__ constexpr SliceTables makeSliceTables() {
  SliceTables s{};
  for (uint32_t b = 0; b < 256; ++b) s.t[0][b] = crc32TableEntry(b);
  for (int j = 1; j < 16; ++j) {
    for (uint32_t b = 0; b < 256; ++b) s.t[j][b] = (s.t[j - 1][b] >> 8) ^ s.t[0][s.t[j - 1][b] & 0xffu];
  }
  return s;
}

__host__ __device__ constexpr CrcConstants makeCrcConstants() {
  CrcConstants t{};
  // x^128 mod P: x^8 (bit 31 is x^0, bit 30 is x^1) squared four times.
  uint32_t x8 = 1u << 31;
  for (int i = 0; i < 8; ++i) x8 = crc32Multiply(x8, 1u << 30);
  uint32_t x128 = x8;
  for (int i = 0; i < 4; ++i) x128 = crc32Multiply(x128, x128);
  uint32_t shift = 1u << 31;
  for (int i = kPieces - 1; i >= 0; --i) {
    t.pieceShift[i] = shift;
    shift = crc32Multiply(shift, x128);
  }
  t.init = crc32Multiply(shift, 0xFFFFFFFFu);  // shift == x^(128 * kPieces) == x^(8 * kChunkBytes)
  return t;
}

__device__ const SliceTables kSliceTables = makeSliceTables();
__constant__ CrcConstants kCrcConstants = makeCrcConstants();

// The zero-initial CRC register of one 16-byte piece: 16 independent cached lookups.
__device__ __forceinline__ uint32_t pieceRegister(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t c = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int b = 0; b < 4; ++b) c ^= __ldg(&kSliceTables.t[15 - (4 * k + b)][(w[k] >> (8 * b)) & 0xffu]);
  }
  return c;
}

// CRC-32 of the chunk whose vector v of lane l is vec[v] (piece v * 32 + l), identical on every lane.
__device__ __forceinline__ uint32_t warpChunkCrc(const uint4 (&vec)[kLaneVectors],
                                                 const uint32_t (&shift)[kLaneVectors]) {
  uint32_t r = 0;
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v) r ^= crc32Multiply(shift[v], pieceRegister(vec[v]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) r ^= __shfl_xor_sync(0xffffffffu, r, o);
  return ~(kCrcConstants.init ^ r);
}

// This lane's piece multipliers (loaded once per kernel; a per-lane index into constant memory serialises).
__device__ __forceinline__ void laneShifts(uint32_t (&shift)[kLaneVectors]) {
  const uint32_t lane = threadIdx.x & 31u;
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v) shift[v] = kCrcConstants.pieceShift[v * 32 + lane];
}

__device__ __forceinline__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t loadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t loadVolatile(const uint32_t* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}
// A peer's bytes, never from a stale L1 line.
__device__ __forceinline__ uint4 loadPeer(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <typename T>
__device__ __forceinline__ T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// Up to 16 bytes of user memory at byte `offset` of a buffer of `total` bytes; zeros past the end.
__device__ __forceinline__ uint4 loadInput(const char* base, size_t offset, size_t total, bool aligned) {
  if (offset + 16 <= total && aligned) return *reinterpret_cast<const uint4*>(base + offset);
  uint4 v = make_uint4(0, 0, 0, 0);
  unsigned char* b = reinterpret_cast<unsigned char*>(&v);
  for (size_t i = 0; i < 16 && offset + i < total; ++i) b[i] = static_cast<unsigned char>(base[offset + i]);
  return v;
}
__device__ __forceinline__ void storeOutput(char* base, size_t offset, size_t total, bool aligned, uint4 v) {
  if (offset + 16 <= total && aligned) {
    *reinterpret_cast<uint4*>(base + offset) = v;
    return;
  }
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
  for (size_t i = 0; i < 16 && offset + i < total; ++i) base[offset + i] = static_cast<char>(b[i]);
}

// The element operations are core/element_ops.h's, the ones the host reduction and the ring's kernels run
// (one source for host and device). Rank p's step combines x = rank p's chunk with y = the partial result of
// ranks 0..p-1; the dispatch picks the final step's operation (Final), and the first and middle steps follow
// from it: avg sums and divides at the last step, premul_sum scales both operands at the first.
template <typename Op>
struct MidStep {
  using type = Op;
};
template <typename Conv>
struct MidStep<element_ops::ReduceOpT<Conv, element_ops::AvgFinalFn>> {
  using type = element_ops::ReduceOpT<Conv, element_ops::SumFn>;
};
template <typename Op>
struct FirstStep {
  using type = typename MidStep<Op>::type;
};
template <typename Conv>
struct FirstStep<element_ops::ReduceOpT<Conv, element_ops::PremulFn<false>>> {
  using type = element_ops::ReduceOpT<Conv, element_ops::PremulFn<true>>;
};

template <typename Op>
__device__ __forceinline__ uint4 applyVector(uint4 x, uint4 y, const element_ops::OpArg& arg) {
  if constexpr (Op::kWordwise) {
    return make_uint4(Op::word(x.x, y.x), Op::word(x.y, y.y), Op::word(x.z, y.z), Op::word(x.w, y.w));
  } else {
    using Elem = typename Op::Elem;
    constexpr int n = 16 / int(sizeof(Elem));
    const Elem* xe = reinterpret_cast<const Elem*>(&x);
    const Elem* ye = reinterpret_cast<const Elem*>(&y);
    uint4 r;
    Elem* re = reinterpret_cast<Elem*>(&r);
#pragma unroll
    for (int i = 0; i < n; ++i) re[i] = Op::element(xe[i], ye[i], arg);
    return r;
  }
}

// Step p of the rank-order reduction (p >= 1) of `size` ranks.
template <typename Final>
__device__ __forceinline__ uint4 reduceStep(int p, int size, uint4 x, uint4 partial,
                                            const element_ops::OpArg& arg) {
  using First = typename FirstStep<Final>::type;
  using Mid = typename MidStep<Final>::type;
  if (p == size - 1 && !std::is_same<Final, Mid>::value) return applyVector<Final>(x, partial, arg);
  if (p == 1) return applyVector<First>(x, partial, arg);
  return applyVector<Mid>(x, partial, arg);
}

struct Kernel {
  const PeerAllreduceArgs& a;
  uint32_t epoch;
  uint32_t half;
  uint64_t deadline;

  __device__ uint32_t* errorWord(int r) const { return at<uint32_t>(a.windows[r], kErrorOffset); }

  // The first error of this rank wins; its window's error word tells the peers to stop.
  __device__ void fail(PeerError code, int peer, uint32_t chunk, uint32_t expected, uint32_t seen) const {
    uint32_t* e = errorWord(a.rank);
    if (atomicCAS(e, 0u, uint32_t(code)) == 0u) {
      e[1] = uint32_t(peer);
      e[2] = chunk;
      e[3] = epoch;
      e[4] = expected;
      e[5] = seen;
      __threadfence_system();
    }
  }

  // Spins until *word satisfies ready(v) or something ends the wait. Returns false (after recording why)
  // when it ended for any other reason. Lane-level: call from one thread.
  template <typename Ready>
  __device__ bool waitFor(const uint32_t* word, int peer, uint32_t chunk, Ready ready) const {
    if (ready(loadAcquire(word))) return true;  // the common case: published already
    for (uint32_t i = 0;; ++i) {
      const uint32_t v = loadAcquire(word);
      if (ready(v)) return true;
      if (loadVolatile(errorWord(a.rank)) != 0) return false;  // this rank already failed
      const uint32_t theirs = loadVolatile(errorWord(peer));
      if (theirs != 0) {
        fail(PeerError::kPeerFailed, peer, chunk, 0, theirs);
        return false;
      }
      if (i % kSpinCheckEvery == kSpinCheckEvery - 1) {
        if (loadVolatile(&a.record->abortRequested) != 0) {
          fail(PeerError::kAborted, -1, chunk, 0, 0);
          return false;
        }
        if (globalTimer() > deadline) {
          fail(PeerError::kTimeout, peer, chunk, 0, v);
          return false;
        }
      }
    }
  }
};

// At most SMs / ranks blocks per rank (launchPeerAllreduce), so one block per SM: min-blocks 1 lets ptxas use
// the 128 registers a 512-thread block may have (left to itself it capped the 1-byte element types at 64 and
// spilled, which regcheck refuses).
template <typename Final>
__global__ void __launch_bounds__(kThreads, 1)
    peerAllreduceKernel(PeerAllreduceArgs a, uint32_t fpCrc, size_t totalBytes, element_ops::OpArg arg) {
  __shared__ uint32_t epochShared;
  __shared__ int okShared;
  uint32_t shift[kLaneVectors];
  laneShifts(shift);
  if (threadIdx.x == 0) {
    epochShared = *at<uint32_t>(a.windows[a.rank], kSeqOffset) + 1;
    okShared = 1;
  }
  __syncthreads();
  Kernel k{a, epochShared, epochShared & 1u, globalTimer() + a.timeoutNs};
  void* mine = a.windows[a.rank];

  // Every peer finished reading this half at epoch - 2 before it is overwritten.
  if (threadIdx.x < unsigned(a.size) && k.epoch > 2) {
    const int p = int(threadIdx.x);
    if (!k.waitFor(at<uint32_t>(a.windows[p], kDoneOffset), p, ~0u,
                   [&](uint32_t v) { return v + 2 >= k.epoch; })) {
      okShared = 0;
    }
  }
  if (threadIdx.x < kFingerprintWords)
    at<uint32_t>(mine, kFingerprintOffset)[threadIdx.x] = a.fingerprint[threadIdx.x];
  __syncthreads();

  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t chunks = uint32_t((totalBytes + kChunkBytes - 1) / kChunkBytes);
  const uint32_t warp = blockIdx.x * kWarps + threadIdx.x / 32;
  const uint32_t warps = gridDim.x * kWarps;
  const bool sendAligned = (reinterpret_cast<uintptr_t>(a.send) & 15u) == 0;
  const bool recvAligned = (reinterpret_cast<uintptr_t>(a.recv) & 15u) == 0;
  ChunkEntry* myTable = at<ChunkEntry>(mine, a.layout.tableOffset[k.half]);
  char* myData = at<char>(mine, a.layout.dataOffset[k.half]);

  // Publish this rank's chunks: bytes, CRC and fingerprint of every chunk of this warp, one fence, then the
  // epochs (release), so a reader that sees an epoch sees what it covers.
  if (okShared) {
    for (uint32_t c = warp; c < chunks; c += warps) {
      uint4 vec[kLaneVectors];
#pragma unroll
      for (int v = 0; v < kLaneVectors; ++v) {
        const size_t off = size_t(c) * kChunkBytes + (size_t(v) * 32 + lane) * 16;
        vec[v] = loadInput(static_cast<const char*>(a.send), off, totalBytes, sendAligned);
        *reinterpret_cast<uint4*>(myData + off) = vec[v];
      }
      const uint32_t crc = warpChunkCrc(vec, shift);
      if (lane == 0) {
        myTable[c].crc = crc;
        myTable[c].fingerprint = fpCrc;
      }
    }
    __threadfence_system();
    __syncwarp();
    for (uint32_t c = warp + lane * warps; c < chunks; c += 32 * warps)
      storeRelease(&myTable[c].epoch, k.epoch);
  }

  // Read, verify and reduce every rank's chunk, in rank order.
  unsigned long long detected = 0, injected = 0;
  bool ok = okShared != 0;
  for (uint32_t c = warp; ok && c < chunks; c += warps) {
    uint4 acc[kLaneVectors];
    for (int p = 0; ok && p < a.size; ++p) {
      ChunkEntry* entry = at<ChunkEntry>(a.windows[p], a.layout.tableOffset[k.half]) + c;
      uint32_t waited = 1, crc = 0, fp = 0;
      if (lane == 0) {
        waited = k.waitFor(&entry->epoch, p, c, [&](uint32_t v) { return v == k.epoch; }) ? 1u : 0u;
        if (waited) {
          crc = loadVolatile(&entry->crc);
          fp = loadVolatile(&entry->fingerprint);
        }
      }
      waited = __shfl_sync(0xffffffffu, waited, 0);
      crc = __shfl_sync(0xffffffffu, crc, 0);
      fp = __shfl_sync(0xffffffffu, fp, 0);
      if (!waited) {
        ok = false;
        break;
      }
      if (fp != fpCrc) {
        if (lane == 0) k.fail(PeerError::kFingerprintMismatch, p, c, fpCrc, fp);
        ok = false;
        break;
      }
      const char* theirs = at<char>(a.windows[p], a.layout.dataOffset[k.half]);
      uint4 vec[kLaneVectors];
      bool verified = false;
      for (int attempt = 0; attempt <= a.maxRereads; ++attempt) {
#pragma unroll
        for (int v = 0; v < kLaneVectors; ++v) {
          const size_t off = size_t(c) * kChunkBytes + (size_t(v) * 32 + lane) * 16;
          vec[v] = loadPeer(reinterpret_cast<const uint4*>(theirs + off));
        }
        if (attempt == 0 && a.faultProb > 0) {
          const uint64_t h = corruptionGarbageWord(
              a.faultSeed, (uint64_t(k.epoch) << 32) ^ (uint64_t(c) << 4) ^ uint64_t(p));
          if (double(uint32_t(h)) < a.faultProb * 4294967296.0) {
            if (lane == ((h >> 32) & 31u)) vec[0].x ^= 1u << ((h >> 40) & 31u);
            ++injected;
          }
        }
        const uint32_t got = warpChunkCrc(vec, shift);
        if (got == crc) {
          verified = true;
          break;
        }
        ++detected;
        if (attempt == a.maxRereads && lane == 0) k.fail(PeerError::kCorrupt, p, c, crc, got);
      }
      if (!verified) {
        ok = false;
        break;
      }
#pragma unroll
      for (int v = 0; v < kLaneVectors; ++v)
        acc[v] = p == 0 ? vec[v] : reduceStep<Final>(p, a.size, vec[v], acc[v], arg);
    }
    if (!ok) break;
#pragma unroll
    for (int v = 0; v < kLaneVectors; ++v) {
      const size_t off = size_t(c) * kChunkBytes + (size_t(v) * 32 + lane) * 16;
      storeOutput(static_cast<char*>(a.recv), off, totalBytes, recvAligned, acc[v]);
    }
  }
  if (lane == 0 && (detected != 0 || injected != 0)) {
    unsigned long long* counters = at<unsigned long long>(mine, kCountersOffset);
    atomicAdd(&counters[0], detected);
    atomicAdd(&counters[1], injected);
  }

  // The last block to finish publishes the epoch as done and reports to the host.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    uint32_t* arrive = at<uint32_t>(mine, kArriveOffset);
    if (atomicAdd(arrive, 1u) == gridDim.x - 1) {
      *arrive = 0;
      *at<uint32_t>(mine, kSeqOffset) = k.epoch;
      // The host record (mapped pinned memory, a PCIe write away) is written only when there is news:
      // the fault-free path touches no host memory. counters[2..3] hold what was last reported.
      const uint32_t* e = at<uint32_t>(mine, kErrorOffset);
      unsigned long long* counters = at<unsigned long long>(mine, kCountersOffset);
      ErrorRecord* r = a.record;
      const unsigned long long detected = *reinterpret_cast<const volatile unsigned long long*>(&counters[0]);
      const unsigned long long injected = *reinterpret_cast<const volatile unsigned long long*>(&counters[1]);
      bool news = false;
      if (detected != counters[2] || injected != counters[3]) {
        r->detected = counters[2] = detected;
        r->injected = counters[3] = injected;
        news = true;
      }
      const uint32_t code = loadVolatile(e);
      if (code != 0 && r->code == 0) {
        r->peer = int32_t(e[1]);
        r->chunk = e[2];
        r->epoch = e[3];
        r->expected = e[4];
        r->seen = e[5];
        __threadfence_system();
        r->code = code;
        news = true;
      }
      if (news) __threadfence_system();
      storeRelease(at<uint32_t>(mine, kDoneOffset), k.epoch);
    }
  }
}

__global__ void __launch_bounds__(kThreads) chunkCrcKernel(const uint4* data, size_t chunks, uint32_t* out) {
  uint32_t shift[kLaneVectors];
  laneShifts(shift);
  const uint32_t lane = threadIdx.x & 31u;
  const size_t warp = blockIdx.x * kWarps + threadIdx.x / 32;
  if (warp >= chunks) return;
  uint4 vec[kLaneVectors];
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v) vec[v] = data[warp * kPieces + v * 32 + lane];
  const uint32_t crc = warpChunkCrc(vec, shift);
  if (lane == 0) out[warp] = crc;
}

}  // namespace

Status launchPeerAllreduce(const PeerAllreduceArgs& args, void* stream) {
  if (args.size < 1 || args.size > kMaxRanks || args.rank < 0 || args.rank >= args.size) {
    return Status(StatusCode::kInvalidArgument, "peer allreduce: rank " + std::to_string(args.rank) +
                                                    " of size " + std::to_string(args.size) +
                                                    " is out of range");
  }
  if (!reduceSupported(args.dtype, args.op)) {
    return Status(StatusCode::kInvalidArgument, std::string("peer allreduce: ") + reduceOpName(args.op) +
                                                    " does not reduce " + dataTypeName(args.dtype));
  }
  const size_t totalBytes = args.count * dataTypeSize(args.dtype);
  if (totalBytes > args.layout.capacity) {
    return Status(StatusCode::kInvalidArgument,
                  "peer allreduce: " + std::to_string(totalBytes) + " bytes exceed the window's " +
                      std::to_string(args.layout.capacity) + " bytes per collective");
  }
  if (args.count != 0 && (args.send == nullptr || args.recv == nullptr)) {
    return Status(StatusCode::kInvalidArgument, "peer allreduce: null buffer");
  }
  for (int r = 0; r < args.size; ++r) {
    if (args.windows[r] == nullptr) {
      return Status(StatusCode::kInvalidArgument, "peer allreduce: no window for rank " + std::to_string(r));
    }
  }
  if (args.record == nullptr) return Status(StatusCode::kInvalidArgument, "peer allreduce: no error record");
  int device = 0, sms = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDevice(&device));
  RINGGUARD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t chunks = (totalBytes + kChunkBytes - 1) / kChunkBytes;
  // Every block of every rank must be resident at once (a block spins on chunks other blocks publish).
  const int maxBlocks = std::max(1, sms / args.size);
  const int blocks =
      int(std::max<size_t>(1, std::min<size_t>((chunks + kWarps - 1) / kWarps, size_t(maxBlocks))));
  const uint32_t fpCrc = crc32(args.fingerprint, sizeof args.fingerprint);
  const element_ops::OpArg arg{args.size, premulScalar(args.dtype, premulFactor(args.op))};
  return element_ops::dispatchReduce(
      args.dtype, args.op, /*finalStep=*/true, /*firstStep=*/false, [&](auto tag) {
        using Final = typename decltype(tag)::type;
        peerAllreduceKernel<Final>
            <<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, fpCrc, totalBytes, arg);
        RINGGUARD_CUDA_CHECK_LAUNCH();
        return Status::ok();
      });
}

Status peerChunkCrcForTest(const void* data, size_t bytes, uint32_t* crcOut) {
  if (bytes % kChunkBytes != 0) {
    return Status(StatusCode::kInvalidArgument, "peerChunkCrcForTest: bytes must be whole chunks");
  }
  const size_t chunks = bytes / kChunkBytes;
  if (chunks == 0) return Status::ok();
  uint32_t* out = nullptr;
  RINGGUARD_CUDA_CHECK(cudaMalloc(&out, chunks * sizeof(uint32_t)));
  chunkCrcKernel<<<unsigned((chunks + kWarps - 1) / kWarps), kThreads>>>(static_cast<const uint4*>(data),
                                                                         chunks, out);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t copied = launched == cudaSuccess
                                 ? cudaMemcpy(crcOut, out, chunks * sizeof(uint32_t), cudaMemcpyDeviceToHost)
                                 : launched;
  cudaFree(out);
  RINGGUARD_CUDA_CHECK(copied);
  return Status::ok();
}

}  // namespace peer
}  // namespace ringguard
