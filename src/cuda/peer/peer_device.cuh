#pragma once
// The device half of the one-sided protocol (docs/design/protocol.md, "The one-sided protocol"), shared by
// every collective's kernel (cuda/peer/*.cu): the chunk CRC in registers, the memory-order primitives, the
// spin with its deadline, and the three steps every kernel is made of:
//
//   Collective k = beginCollective(...)   epoch from the window, acknowledgements, arrival slot
//   publishChunks / readChunk             a warp publishes chunks of its window / reads one peer chunk,
//                                         verified (CRC, fingerprint, re-reads, injected faults)
//   finishCollective(k)                   fault counters, arrival check of every peer, seq, host record, done
//
// The arrival kernel (arrival.cu) takes the first step and finishCollective's arrival check (checkArrivals)
// alone, in one block, before a wide grid is launched.
//
// Send/recv (sendrecv.cu) takes the middle step on its channels' slots (publishChunksTo / readChunkAt) and
// begins and ends on words of its own (no epoch, acknowledgement or arrival slot of the collectives).
//
// One warp owns a chunk: 32 lanes x kLaneVectors 16-byte vectors = kChunkBytes. Chunk c is always handled
// by warp c % warps in every phase of a kernel, so a chunk of an in-place call is read before it is written
// by program order within one warp.
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/chunk_crc.h"
#include "core/corruption_plan.h"
#include "core/peer_plan.h"
#include "core/peer_window_layout.h"
#include "cuda/peer/peer_collectives.h"
#include "cuda/peer/step_clock.cuh"

namespace ringguard {
namespace peer {
namespace {  // each kernel file gets its own copy of the tables (whole-program compilation)

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPieces = chunk_crc::kPieces;
constexpr uint32_t kSpinCheckEvery = 256;

// core/chunk_crc.h's tables (slicing-by-16 and the fixed shifts): the source each block copies into its
// shared memory at entry (stageCrcTables).
__device__ const chunk_crc::Tables kChunkCrcTables = chunk_crc::makeTables();
static_assert(sizeof(chunk_crc::Tables) % 16 == 0, "copied 16 bytes at a time");

// The block's copy of the CRC tables (one object per block: a function's static shared variable; its
// address is a constant, so no register holds it).
__device__ __forceinline__ chunk_crc::Tables& crcTables() {
  __shared__ chunk_crc::Tables tables;
  return tables;
}
// Starts the copy of the CRC tables into crcTables() (cp.async: no thread waits for it here);
// crcTablesArrived() then a block barrier must come before the first warpChunkCrc.
// Shared memory, not the read-only cache: every GPU-scope fence and acquire load of the protocol invalidates
// the SM's L1 (CCTL.IVALL in the SASS), so tables read through L1 came from L2 at each of the chunk CRC's ~7
// dependent lookup steps, ~1.4 us for a lone chunk (docs/PERFORMANCE.md, "Per-step clocks"), where shared
// memory keeps them across the fences. 40 KiB a block; the copy runs under the acknowledgement wait,
// and what is left of it delays the block's first publish. Not
// inlined: inlined, its copy loop pushed the two-shot kernels 8 bytes past their 128 registers (spills).
__device__ __noinline__ void stageCrcTables() {
  constexpr unsigned kVectors = sizeof(chunk_crc::Tables) / 16;
  const char* from = reinterpret_cast<const char*>(&kChunkCrcTables);
  char* to = reinterpret_cast<char*>(&crcTables());
  for (unsigned i = threadIdx.x; i < kVectors; i += blockDim.x)
    __pipeline_memcpy_async(to + 16 * i, from + 16 * i, 16);
  __pipeline_commit();
}
// This thread's part of the copy has landed (a block barrier after it: every thread's has).
__device__ __forceinline__ void crcTablesArrived() { __pipeline_wait_prior(0); }

// CRC-32 of the chunk whose vector v of lane l is vec[v] (piece v * 32 + l), identical on every lane:
// core/chunk_crc.h's lane Horner and warp tree over the block's shared copy of the tables.
__device__ __forceinline__ uint32_t warpChunkCrc(const uint4 (&vec)[kLaneVectors]) {
  const chunk_crc::Tables& t = crcTables();
  const auto load = [](const uint32_t* p) { return *p; };
  uint32_t h = 0;
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v) {
    const uint32_t w[4] = {vec[v].x, vec[v].y, vec[v].z, vec[v].w};
    const uint32_t piece = chunk_crc::pieceRegister(t, w, load);
    h = v == 0 ? piece : chunk_crc::laneStep(t, h, piece, load);
  }
#pragma unroll
  for (int level = 0; level < chunk_crc::kTreeLevels; ++level) {
    // Lane l + 2^level's value (lanes past 31 get their own, which no lane that matters reads).
    const uint32_t upper = __shfl_down_sync(0xffffffffu, h, 1u << level);
    h = chunk_crc::treeStep(t, level, h, upper, load);
  }
  return chunk_crc::finish(t, __shfl_sync(0xffffffffu, h, 0));
}

__device__ __forceinline__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The window flags' memory order (every flag is a 64-bit epoch), at GPU scope when every window is on this
// GPU (PeerWindowArgs::oneDevice: processes sharing one device, as under MPS) and at system scope otherwise
// (GPUs of one host).
__device__ __forceinline__ uint64_t loadAcquire(const uint64_t* p, bool gpu) {
  uint64_t v;
  if (gpu) {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  }
  return v;
}
__device__ __forceinline__ void storeRelease(uint64_t* p, uint64_t v, bool gpu) {
  if (gpu) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
}
__device__ __forceinline__ void storeRelaxed(uint64_t* p, uint64_t v, bool gpu) {
  if (gpu) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
}
__device__ __forceinline__ void fence(bool gpu) {
  if (gpu) {
    __threadfence();
  } else {
    __threadfence_system();
  }
}
__device__ __forceinline__ uint32_t loadVolatile(const uint32_t* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}
__device__ __forceinline__ uint64_t loadVolatile(const uint64_t* p) {
  return *reinterpret_cast<const volatile uint64_t*>(p);
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

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Byte offset of lane's vector v of chunk c within the chunked bytes.
__device__ __forceinline__ size_t vectorOffset(uint32_t c, int v, uint32_t lane) {
  return size_t(c) * kChunkBytes + (size_t(v) * 32 + lane) * 16;
}

// Up to 16 bytes of user memory at byte `offset` of a buffer of `total` bytes; zeros past the end.
__device__ __forceinline__ uint4 loadInput(const char* base, size_t offset, size_t total, bool aligned) {
  if (offset + 16 <= total && aligned) return *reinterpret_cast<const uint4*>(base + offset);
  uint4 v = make_uint4(0, 0, 0, 0);
  unsigned char* b = reinterpret_cast<unsigned char*>(&v);
  for (size_t i = 0; i < 16 && offset + i < total; ++i) b[i] = static_cast<unsigned char>(base[offset + i]);
  return v;
}
// The lane's vectors of chunk c of a user buffer of `total` bytes.
__device__ __forceinline__ void loadInputChunk(const void* base, uint32_t c, size_t total, bool aligned,
                                               uint4 (&vec)[kLaneVectors]) {
  const uint32_t lane = threadIdx.x & 31u;
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v)
    vec[v] = loadInput(static_cast<const char*>(base), vectorOffset(c, v, lane), total, aligned);
}

// The bytes of the 16-byte vector v that falls at byte `offset` of the chunked bytes and inside [lo, hi),
// stored at out + (offset - lo) (so `out` holds the hi - lo bytes of that range). `aligned`: out - lo is
// 16-byte aligned, so a whole vector inside the range is one store.
__device__ __forceinline__ void storeRange(char* out, size_t offset, size_t lo, size_t hi, bool aligned,
                                           uint4 v) {
  if (offset >= lo && offset + 16 <= hi && aligned) {
    *reinterpret_cast<uint4*>(out + (offset - lo)) = v;
    return;
  }
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
  for (size_t i = 0; i < 16; ++i) {
    if (offset + i >= lo && offset + i < hi) out[offset + i - lo] = static_cast<char>(b[i]);
  }
}
__device__ __forceinline__ void storeOutputChunk(void* out, uint32_t c, size_t lo, size_t hi, bool aligned,
                                                 const uint4 (&vec)[kLaneVectors]) {
  const uint32_t lane = threadIdx.x & 31u;
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v)
    storeRange(static_cast<char*>(out), vectorOffset(c, v, lane), lo, hi, aligned, vec[v]);
}

// Set when a thread of this block records an error (Collective::fail): the host record then has news
// (finishCollective, its only reader). Zeroed by beginCollective before the block's first barrier; the
// send/recv kernel, which reports unconditionally, only writes it.
__device__ __forceinline__ int& blockFailed() {
  __shared__ int failed;
  return failed;
}

// The block's deadline for every wait (%globaltimer ns): set by thread 0 before the block's first barrier
// (beginCollective, the send/recv kernel), read only once a wait has spun a while. In shared memory, not in
// Collective: two registers the reducing kernels do not have to spare.
__device__ __forceinline__ uint64_t& blockDeadline() {
  __shared__ uint64_t deadline;
  return deadline;
}

// One kernel's view of the running collective: its epoch and what it counted.
struct Collective {
  const PeerWindowArgs* a;
  uint64_t epoch;  // 64 bits: never wraps (at one collective a microsecond, 2^32 would in 72 minutes)
  uint32_t fpCrc;  // the fingerprint's CRC every chunk carries (the algorithm folded in)
  uint32_t lane;
  uint32_t warp;      // this warp's index over the grid
  uint32_t warps;     // warps in the grid
  bool ok;            // this block's acknowledgements arrived (false: nothing is published or read)
  bool onePeer;       // send/recv: a timeout names the peer waited for (no arrival slots to look at)
  uint32_t detected;  // this warp's reads (a 32-bit count: the window's counters are 64-bit)
  uint32_t injected;

  __device__ uint32_t half() const { return uint32_t(epoch & 1u); }  // the window half this epoch uses
  __device__ void* window(int r) const { return a->windows[r]; }
  __device__ void* mine() const { return a->windows[a->rank]; }
  __device__ uint32_t* errorWord(int r) const { return at<uint32_t>(window(r), kErrorOffset); }
  __device__ bool mineToHandle(uint32_t c) const { return c % warps == warp; }
  // The first chunk >= begin that this warp handles (chunk c belongs to warp c % warps).
  __device__ uint32_t firstOf(uint32_t begin) const { return begin + (warp + warps - begin % warps) % warps; }

  // The first error of this rank wins; its window's error word tells the peers to stop.
  __device__ void fail(PeerError code, int peer, uint32_t chunk, uint32_t expected, uint32_t seen) const {
    uint32_t* e = errorWord(a->rank);
    blockFailed() = 1;
    // What this thread stored, or saw stored (the arrival warp's lane 0 stores this rank's arrival; the
    // lanes that check the peers' fail here), comes before the error word for a peer that sees the word,
    // fences and then reads them (the wait's peer-failed branch reads this rank's arrival). Error path only.
    __threadfence_system();
    if (atomicCAS(e, 0u, uint32_t(code)) == 0u) {
      e[1] = uint32_t(peer);
      e[2] = chunk;
      e[3] = uint32_t(epoch);
      e[4] = expected;
      e[5] = seen;
      e[6] = uint32_t(epoch >> 32);
      __threadfence_system();
    }
  }

  // The rank a timeout names: the lowest peer that has not arrived at this epoch (its arrival slot for this
  // half holds an older one), else `waited` (the peer whose word this wait was for). A rank waiting on a peer
  // that itself waits on a stopped rank names the stopped rank, as every rank does, not the peer in between.
  __device__ int absentPeer(int waited) const {
    for (int r = 0; r < a->size; ++r) {
      if (r == a->rank) continue;
      if (loadVolatile(at<uint64_t>(window(r), kArrivalOffset + 64 * half())) != epoch) return r;
    }
    return waited;
  }

  // Whether `peer` arrived at this epoch with another collective (its arrival slot for this half holds this
  // epoch and another fingerprint CRC): then nothing this rank waits for from it will come, and the mismatch
  // is recorded now rather than at the deadline. A rank whose call was rejected by its own checks arrives so
  // (the decline kernel, decline.cu), as does a rank that ran another collective and published nothing this
  // wait is for. The waits' slow branch only (every kSpinCheckEvery spins): nothing on the common path.
  __device__ bool arrivedOtherwise(int peer, uint32_t chunk) const {
    const size_t slot = kArrivalOffset + 64 * half();
    if (unsigned(peer) >= unsigned(a->size) ||
        loadAcquire(at<uint64_t>(window(peer), slot), a->oneDevice) != epoch)
      return false;
    const uint32_t theirs = loadVolatile(at<uint32_t>(window(peer), slot + kArrivalFingerprint));
    if (theirs == fpCrc) return false;
    fail(PeerError::kFingerprintMismatch, peer, chunk, fpCrc, theirs);
    return true;
  }
  // arrivedOtherwise of every peer: a wait whose peer failed asks it of all of them, since that peer may have
  // failed on a third rank's arrival (the two-shot's owner of a share reads every rank).
  __device__ bool anyArrivedOtherwise(uint32_t chunk) const {
    for (int r = 0; r < a->size; ++r) {
      if (r != a->rank && arrivedOtherwise(r, chunk)) return true;
    }
    return false;
  }

  // Spins until *word satisfies ready(v) or something ends the wait. Returns false (after recording why)
  // when it ended for any other reason; a timeout names absentPeer(peer), or `peer` itself when
  // `nameAbsent` is false (the acknowledgement wait, before any rank's arrival, which also does not look at
  // the peer's arrival: arrivedOtherwise). Lane-level: call from one thread.
  template <typename Word, typename Ready>
  __device__ bool waitFor(const Word* word, int peer, uint32_t chunk, Ready ready,
                          bool nameAbsent = true) const {
    if (ready(loadAcquire(word, a->oneDevice))) return true;  // the common case: published already
    for (uint32_t i = 0;; ++i) {
      const Word v = loadAcquire(word, a->oneDevice);
      if (ready(v)) return true;
      if (loadVolatile(errorWord(a->rank)) != 0) return false;  // this rank already failed
      const uint32_t theirs = loadVolatile(errorWord(peer));
      if (theirs != 0) {
        // One last look (after a fence, the error word's acquire): the peer may have published what this
        // wait is for before it failed, as both ends of a send/recv do their rendezvous entries before the
        // check that fails, so each end reports the mismatch itself.
        fence(a->oneDevice);
        if (ready(loadAcquire(word, a->oneDevice))) return true;
        // A rank that arrived with another collective (a declined call among them) is why the peer failed,
        // or this rank will: the mismatch, with both collectives, says more than "a peer failed".
        if (nameAbsent && !onePeer && anyArrivedOtherwise(chunk)) return false;
        fail(PeerError::kPeerFailed, peer, chunk, 0, theirs);
        return false;
      }
      if (i % kSpinCheckEvery == kSpinCheckEvery - 1) {
        if (loadVolatile(&a->record->abortRequested) != 0) {
          fail(PeerError::kAborted, -1, chunk, 0, 0);
          return false;
        }
        if ((loadVolatile(&a->record->exitedPeers) >> peer) & 1u) {
          // The peer's process is gone (the host's watchdog saw it): what it stored before it exited is
          // still there, so one last look, then nothing more will come.
          fence(a->oneDevice);
          if (ready(loadAcquire(word, a->oneDevice))) return true;
          fail(PeerError::kPeerExited, peer, chunk, 0, 0);
          return false;
        }
        if (nameAbsent && !onePeer && arrivedOtherwise(peer, chunk)) return false;
        if (globalTimer() > blockDeadline()) {
          fail(PeerError::kTimeout, nameAbsent && !onePeer ? absentPeer(peer) : peer, chunk, 0, uint32_t(v));
          return false;
        }
      }
    }
  }

  __device__ ChunkEntry* table(int r, bool result) const {
    return at<ChunkEntry>(window(r),
                          result ? a->layout.resultTableOffset[half()] : a->layout.tableOffset[half()]);
  }
  __device__ char* data(int r) const { return at<char>(window(r), a->layout.dataOffset[half()]); }
};

// The two ends of the programmatic dependent launch of a grid behind the arrival kernel (grid_launch.cuh):
// the arrival kernel's blocks let the grid be launched (every thread calls releaseGrid), and the grid's
// threads wait until the arrival kernel has finished and its writes are visible (awaitArrivalKernel; at once
// when the grid was launched the ordinary way). Before compute capability 9.0 there is no such launch: the
// host launches the grid after the arrival kernel as any kernel, and both are no-ops.
__device__ __forceinline__ void releaseGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void awaitArrivalKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Starts a collective in every block: the epoch (seq + 1, kept on the device so a replayed graph gets a fresh
// one), the acknowledgements (every peer finished reading half e & 1 at epoch e - 2 before this rank
// overwrites it), then this rank's fingerprint words and its arrival slot {epoch, fpCrc} for the half. The
// arrival is block 0's last warp's (kArrivalWarp): its release store, a fence, is off the path of warp 0,
// which holds chunk 0, a small call's only chunk.
// kTables: the block copies the CRC tables into its shared memory (every kernel that reads or publishes a
// chunk; the arrival kernel reads none). A grid behind the arrival kernel first waits for it to finish.
constexpr unsigned kArrivalWarp = kWarps - 1;
template <bool kTables = true>
__device__ __forceinline__ Collective beginCollective(const PeerWindowArgs& a, uint32_t fpCrc) {
  __shared__ uint64_t epochShared;
  __shared__ int okShared;
  RINGGUARD_STEP_ENTRY();
  if (a.arriveFirst && kTables) awaitArrivalKernel();
  Collective k;
  k.a = &a;
  if (threadIdx.x == 0) {
    epochShared = *at<uint64_t>(a.windows[a.rank], kSeqOffset) + 1;
    // A rank that failed publishes and reads nothing more (its error word is never cleared; the host poisons
    // the communicator at its next call): a kernel queued behind the one that failed, as a call made right
    // after a declined one, must not overwrite the fingerprint words a peer reads to name that collective.
    // An abort sets it too (abort_mark.cu), so a kernel that starts after one ends here.
    okShared = loadVolatile(at<uint32_t>(a.windows[a.rank], kErrorOffset)) == 0 ? 1 : 0;
    blockFailed() = 0;
    blockDeadline() = globalTimer() + a.timeoutNs;
    RINGGUARD_STEP(kStepSeqRead);
  }
  __syncthreads();
  // After the seq read, not before it: issued first, the block's 40 KiB copy queued that read behind it
  // (~0.5 us at 1 KiB in the clocks); here it runs under the acknowledgement wait.
  if (kTables) stageCrcTables();
  k.epoch = epochShared;
  k.fpCrc = fpCrc;
  k.lane = threadIdx.x & 31u;
  k.warp = blockIdx.x * kWarps + threadIdx.x / 32;
  k.warps = gridDim.x * kWarps;
  k.detected = 0;
  k.injected = 0;
  k.onePeer = false;
  if (okShared && threadIdx.x < unsigned(a.size) && k.epoch > 2) {
    const int p = int(threadIdx.x);
    if (!k.waitFor(
            at<uint64_t>(a.windows[p], kDoneOffset), p, ~0u, [&](uint64_t v) { return v + 2 >= k.epoch; },
            /*nameAbsent=*/false)) {
      okShared = 0;
    }
  }
  if (kTables) crcTablesArrived();
  __syncthreads();
  RINGGUARD_STEP(kStepAcked);
  if (blockIdx.x == 0 && okShared && threadIdx.x == 32 * kArrivalWarp) {
    // One thread stores the words and the slot's fingerprint, then the epoch with release order, so a peer
    // that sees the epoch sees both (the words name this collective in a peer's mismatch error).
    uint32_t* words = at<uint32_t>(k.mine(), kFingerprintOffset);
    for (int i = 0; i < kFingerprintWords; ++i) words[i] = a.fingerprint[i];
    const size_t slot = kArrivalOffset + 64 * k.half();
    *at<uint32_t>(k.mine(), slot + kArrivalFingerprint) = fpCrc;
    storeRelease(at<uint64_t>(k.mine(), slot), k.epoch, a.oneDevice);
  }
  k.ok = okShared != 0;
  return k;
}

// Publishes chunks [begin, end) that `want(c)` selects, of those this warp handles, into `table` and `data`
// of this rank's window: load(c, vec) gives the bytes; they are stored with their CRC
// and the fingerprint, then, after one fence, every chunk's epoch (release order), so a reader that sees
// an epoch sees what it covers.
template <typename Want, typename Load>
__device__ __forceinline__ void publishChunksTo(Collective& k, ChunkEntry* table, char* data, uint32_t begin,
                                                uint32_t end, Want want, Load load) {
  if (!k.ok) return;
  for (uint32_t c = k.firstOf(begin); c < end; c += k.warps) {
    if (!want(c)) continue;
    uint4 vec[kLaneVectors];
    load(c, vec);
    RINGGUARD_STEP_AFTER(kStepInputLoaded, vec);
#pragma unroll
    for (int v = 0; v < kLaneVectors; ++v)
      *reinterpret_cast<uint4*>(data + vectorOffset(c, v, k.lane)) = vec[v];
    const uint32_t crc = warpChunkCrc(vec);
    if (k.lane == 0) {
      table[c].crc = crc;
      table[c].fingerprint = k.fpCrc;
    }
    RINGGUARD_STEP(kStepPublishCrc);
  }
  // The warp barrier first: every lane's bytes and entries happen before each lane's fence, and a fence
  // followed by a relaxed store is a release of them, so the epoch stores need not be releases that fence
  // again (one per chunk). The lanes share them: lane l takes the warp's chunks l, l + 32, ..., so 32
  // chunks' epochs are one store instruction.
  __syncwarp();
  fence(k.a->oneDevice);
  RINGGUARD_STEP(kStepPublishFence);
  const PeerFault& f = k.a->fault;
  if (f.on() && f.mode == PeerFault::kDelay && f.hits(f.hash(k.epoch, k.warp, k.a->rank))) {
    // A late peer (RINGGUARD_FAULT_MODE=delay): this warp's epochs go out delayNs late; nothing is damaged,
    // the readers wait (within their deadline) and nothing is counted.
    // An abort ends the delay too (the readers' waits see it and stop): RINGGUARD_FAULT_DELAY_MS may be long.
    const uint64_t until = globalTimer() + f.delayNs;
    while (globalTimer() < until && loadVolatile(&k.a->record->abortRequested) == 0) {
    }
  }
  for (uint32_t c = k.firstOf(begin) + k.lane * k.warps; c < end; c += 32 * k.warps) {
    if (want(c)) storeRelaxed(&table[c].epoch, k.epoch, k.a->oneDevice);
  }
  RINGGUARD_STEP(kStepEpochsStored);
}
// The collectives' form: into this rank's chunk table (or result table) and data of the collective's half.
template <typename Want, typename Load>
__device__ __forceinline__ void publishChunks(Collective& k, bool result, uint32_t begin, uint32_t end,
                                              Want want, Load load) {
  publishChunksTo(k, k.table(k.a->rank, result), k.data(k.a->rank), begin, end, want, load);
}

// The flipped bits of a hit (hash h, n = f.span(h)) that fall in the 32 chunk bits from firstBit, as a word's
// XOR mask. Not inlined: it runs only on an injected read, and its loop inlined eight times into every
// reading loop pushed the reducing kernels past their registers.
__device__ __noinline__ uint32_t flipMask(const PeerFault& f, uint64_t h, int n, uint32_t firstBit) {
  uint32_t mask = 0;
  for (int j = 0; j < n; ++j) {
    const uint32_t bit = f.position(h, j);
    if (bit >= firstBit && bit < firstBit + 32 && f.flipped(h, j)) mask |= 1u << (bit - firstBit);
  }
  return mask;
}

// Damages one read of a chunk in registers as `f.mode` says (core/peer_fault.h): bits of the bytes (the lane
// that holds each flips it), the whole chunk (garbage), one bit of the CRC (trailer) or of the fingerprint
// (control) the read is compared with. Warp-level: every lane calls it with the same h.
__device__ __forceinline__ void injectReadFault(const PeerFault& f, uint64_t h, uint32_t lane,
                                                uint4 (&vec)[kLaneVectors], uint32_t* crc, uint32_t* fp) {
  if (f.mode == PeerFault::kTrailer) {
    *crc ^= 1u << ((h >> 40) & 31u);
    return;
  }
  if (f.mode == PeerFault::kControl) {
    *fp ^= 1u << ((h >> 40) & 31u);
    return;
  }
  if (f.mode == PeerFault::kGarbage) {
#pragma unroll
    for (int v = 0; v < kLaneVectors; ++v) {
      const uint32_t first = uint32_t(v * 32 + int(lane)) * 4;  // the chunk's word index of vec[v].x
      vec[v].x = PeerFault::garbageWord(h, first, vec[v].x);
      vec[v].y = PeerFault::garbageWord(h, first + 1, vec[v].y);
      vec[v].z = PeerFault::garbageWord(h, first + 2, vec[v].z);
      vec[v].w = PeerFault::garbageWord(h, first + 3, vec[v].w);
    }
    return;
  }
  // Word by word of this lane (each word's mask from every flipped bit that falls in it), so only one mask is
  // live and nothing indexes vec at run time (either put it in local memory: spills, regcheck refuses).
  const int n = f.span(h);
  const auto maskOf = [&](uint32_t firstBit) { return flipMask(f, h, n, firstBit); };
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v) {
    const uint32_t first = (uint32_t(v) * 32 + lane) * 128;  // the chunk bit of vec[v].x's bit 0
    vec[v].x ^= maskOf(first);
    vec[v].y ^= maskOf(first + 32);
    vec[v].z ^= maskOf(first + 64);
    vec[v].w ^= maskOf(first + 96);
  }
}

// Reads chunk c of rank p's window (`table`, `theirs`: a chunk table and its data there) into vec once p
// published it at this epoch: the fingerprint compared, the CRC recomputed and compared, re-read up to
// maxRereads times on a mismatch (each counted), with fault injection (injectReadFault). False (the error
// recorded) when the chunk cannot be had. Warp-level: every lane calls it.
__device__ __forceinline__ bool readChunkAt(Collective& k, int p, ChunkEntry* table, const char* theirs,
                                            uint32_t c, uint4 (&vec)[kLaneVectors]) {
  const PeerWindowArgs& a = *k.a;
  ChunkEntry* entry = table + c;
  uint32_t waited = 1;
  if (k.lane == 0)
    waited = k.waitFor(&entry->epoch, p, c, [&](uint64_t v) { return v == k.epoch; }) ? 1u : 0u;
  RINGGUARD_STEP_AFTER(kStepPeer + kPeerSteps * p + kStepPeerEpochSeen, waited);
  waited = __shfl_sync(0xffffffffu, waited, 0);
  if (!waited) return false;
  // A shuffle orders no memory: the warp barrier makes lane 0's acquire of the epoch happen before every
  // lane's loads of the entry and the bytes below (PTX memory model; ld.volatile reaching L2 made it hold
  // in practice on one GPU, not in the model).
  __syncwarp();
  // The entry and the first read of the bytes are in flight together (one round trip, not two): the bytes
  // are used only once the fingerprint matched. Every attempt reads both again: a fingerprint or a CRC that
  // differs once is a transit corruption (re-read, counted); one that differs on every read is not.
  const PeerFault& f = a.fault;
  for (int attempt = 0; attempt <= a.maxRereads; ++attempt) {
    uint32_t crc = 0, fp = 0, same = 1;
    if (k.lane == 0) {
      // A re-read must still find this epoch's chunk: a producer that had overwritten it (a slot reused
      // before every reader acknowledged it) would hand the re-read the next epoch's bytes with their own
      // valid CRC. Checked on re-reads only, off the fault-free path.
      if (attempt > 0 && loadVolatile(&entry->epoch) != k.epoch) {
        same = 0;
        k.fail(PeerError::kCorrupt, p, c, uint32_t(k.epoch), uint32_t(loadVolatile(&entry->epoch)));
      }
      crc = loadVolatile(&entry->crc);
      fp = loadVolatile(&entry->fingerprint);
    }
    if (__shfl_sync(0xffffffffu, same, 0) == 0) return false;
#pragma unroll
    for (int v = 0; v < kLaneVectors; ++v)
      vec[v] = loadPeer(reinterpret_cast<const uint4*>(theirs + vectorOffset(c, v, k.lane)));
    crc = __shfl_sync(0xffffffffu, crc, 0);
    fp = __shfl_sync(0xffffffffu, fp, 0);
    RINGGUARD_STEP_AFTER(kStepPeer + kPeerSteps * p + kStepPeerLoaded, vec);
    if (f.damagesReads() && attempt < f.attempts()) {
      const uint64_t h = f.hash(k.epoch, c, p);  // recomputed, not kept live across the loop (registers)
      if (f.hits(h)) {
        injectReadFault(f, h, k.lane, vec, &crc, &fp);
        ++k.injected;
      }
    }
    if (fp != k.fpCrc) {
      ++k.detected;
      if (attempt == a.maxRereads && k.lane == 0) k.fail(PeerError::kFingerprintMismatch, p, c, k.fpCrc, fp);
      continue;
    }
    const uint32_t got = warpChunkCrc(vec);
    if (got == crc) {
      RINGGUARD_STEP(kStepPeer + kPeerSteps * p + kStepPeerVerified);
      return true;
    }
    ++k.detected;
    if (attempt == a.maxRereads && k.lane == 0) k.fail(PeerError::kCorrupt, p, c, crc, got);
  }
  return false;
}
// The collectives' form: chunk c of rank p's chunk table (or result table) and data of the collective's half.
__device__ __forceinline__ bool readChunk(Collective& k, int p, bool result, uint32_t c,
                                          uint4 (&vec)[kLaneVectors]) {
  return readChunkAt(k, p, k.table(p, result), k.data(p), c, vec);
}

// The warp's fault counters into this rank's window (lane 0).
__device__ __forceinline__ void addFaultCounts(const Collective& k) {
  if (k.lane == 0 && (k.detected != 0 || k.injected != 0)) {
    unsigned long long* counters = at<unsigned long long>(k.mine(), kCountersOffset);
    atomicAdd(&counters[0], static_cast<unsigned long long>(k.detected));
    atomicAdd(&counters[1], static_cast<unsigned long long>(k.injected));
  }
}

// The last block of a kernel: the window's counters and first error into the host record, when there is
// news. The host record (mapped pinned memory, a PCIe write away) is written only then: the fault-free path
// touches no host memory. counters[2..3] hold what was last reported and counters[4] whether the error was:
// the fields written here are written by nothing else and read only by the host, so nothing here reads them
// back (a read of mapped memory is a PCIe round trip). The system fences order the error's fields before its
// code for the host's watchdog, which reads the record while kernels run. The counts need none: the host
// reads them as "so far" (at each launch and in counters()), a late value is picked up by a later read, and
// a read after a stream synchronisation sees every finished kernel's writes.
__device__ __forceinline__ void reportToHost(const PeerWindowArgs& a, void* mine) {
  const uint32_t* e = at<uint32_t>(mine, kErrorOffset);
  unsigned long long* counters = at<unsigned long long>(mine, kCountersOffset);
  ErrorRecord* r = a.record;
  const unsigned long long detected = *reinterpret_cast<const volatile unsigned long long*>(&counters[0]);
  const unsigned long long injected = *reinterpret_cast<const volatile unsigned long long*>(&counters[1]);
  if (detected != counters[2] || injected != counters[3]) {
    r->detected = counters[2] = detected;
    r->injected = counters[3] = injected;
  }
  const uint32_t code = loadVolatile(e);
  if (code != 0 && counters[4] == 0) {
    counters[4] = 1;
    r->peer = int32_t(e[1]);
    r->chunk = e[2];
    r->epoch = uint64_t(e[6]) << 32 | e[3];
    r->expected = e[4];
    r->seen = e[5];
    // A collective's fingerprint mismatch: both collectives' words for the host's message (a send/recv's
    // header holds no message's words: its own error names both counts).
    if (code == uint32_t(PeerError::kFingerprintMismatch) && e[1] < uint32_t(a.size) &&
        a.fingerprint[0] != uint32_t(CollectiveKind::kSendRecv)) {
      for (int i = 0; i < kFingerprintWords; ++i) {
        r->fingerprints[0][i] = a.fingerprint[i];
        r->fingerprints[1][i] = loadVolatile(at<uint32_t>(a.windows[e[1]], kFingerprintOffset) + i);
      }
      r->fingerprintsKnown = 1;
    }
    __threadfence_system();
    r->code = code;
    __threadfence_system();
  }
}

// Ends the collective in every block (every thread calls it): the warp's counters into the window, then block
// 0's arrival warp checks every peer's arrival slot for this half (same epoch, same fingerprint: ranks that
// ran different collectives fail here even when one of them read nothing; off warp 0's path, so a small
// call's idle warp checks while warp 0 works), and the last block to finish (the only one of a one-block
// grid: no grid barrier then) writes seq = e, reports news to the host record and publishes done = e (the
// acknowledgement) with release order. The window's counters and error word are read, and the host record
// written, only when a block counted a fault or failed (it added kArriveNews to the arrival count; the last
// block sees the sum above the low 16 bits): a fault-free call makes no load of its own window's counters.
constexpr uint32_t kArriveNews = 1u << 16;  // added to the arrival count by a block with news (grids < 2^16)

// The grid's barrier, called by thread 0 of every block after a block barrier: the block's writes (that
// barrier, then the release fence here) happen before its count of `add` on `arrive`. The last block to count
// (the low 16 bits reach gridDim.x - 1) resets the count, and after its acquire fence sees every other
// block's writes. Returns whether this block is last; `before` gets the count it found (kArriveNews bits
// included).
__device__ __forceinline__ bool lastBlockOfGrid(uint32_t* arrive, uint32_t add, uint32_t& before) {
  __threadfence();
  RINGGUARD_STEP(kStepGridFence);
  before = atomicAdd(arrive, add);
  const bool last = (before & (kArriveNews - 1)) == gridDim.x - 1;
  RINGGUARD_STEP_AFTER(kStepArriveCounted, uint32_t(last));
  if (last) {
    __threadfence();
    *arrive = 0;
  }
  return last;
}

// Block 0's arrival warp waits for every peer's arrival slot for this half to hold this epoch and compares
// its fingerprint CRC with this rank's (a mismatch fails naming the peer). Every thread of the block calls
// it; the block barrier after it is the caller's. finishCollective and the arrival kernel (arrival.cu).
__device__ __forceinline__ void checkArrivals(const Collective& k) {
  const PeerWindowArgs& a = *k.a;
  // The arrival warp's lane 0 stored this rank's arrival (beginCollective); a lane below that fails on a
  // peer's arrival must not make its error word visible before it (fail() fences after this barrier).
  if (blockIdx.x == 0 && threadIdx.x / 32 == kArrivalWarp) __syncwarp();
  const unsigned p = threadIdx.x - 32 * kArrivalWarp;
  if (blockIdx.x == 0 && k.ok && threadIdx.x >= 32 * kArrivalWarp && p < unsigned(a.size) &&
      int(p) != a.rank) {
    // A peer can be at most one epoch ahead (it waits for this rank's done >= its epoch - 2), so slot h
    // still holds this epoch's arrival or an older one: equality is the test.
    const size_t slot = kArrivalOffset + 64 * k.half();
    if (k.waitFor(at<uint64_t>(a.windows[p], slot), int(p), ~0u, [&](uint64_t v) { return v == k.epoch; })) {
      const uint32_t theirs = loadVolatile(at<uint32_t>(a.windows[p], slot + kArrivalFingerprint));
      if (theirs != k.fpCrc) k.fail(PeerError::kFingerprintMismatch, int(p), ~0u, k.fpCrc, theirs);
    }
  }
}

__device__ __forceinline__ void finishCollective(Collective& k) {
  const PeerWindowArgs& a = *k.a;
  void* mine = k.mine();
  addFaultCounts(k);
  checkArrivals(k);
  const bool news = __syncthreads_or(k.detected != 0 || k.injected != 0) != 0 || blockFailed() != 0;
  RINGGUARD_STEP(kStepArrivalChecked);
  if (threadIdx.x == 0) {
    bool last = true, anyNews = news;
    if (gridDim.x > 1) {
      // The last block's release of `done` comes after every block's count.
      uint32_t before = 0;
      last = lastBlockOfGrid(at<uint32_t>(mine, kArriveOffset), 1u + (news ? kArriveNews : 0u), before);
      anyNews = news || before >= kArriveNews;
    }
    if (last) {
      RINGGUARD_STEP_TAIL(kStepLastArrive);
      *at<uint64_t>(mine, kSeqOffset) = k.epoch;
      if (anyNews) reportToHost(a, mine);
      RINGGUARD_STEP_TAIL(kStepLastReported);
      storeRelease(at<uint64_t>(mine, kDoneOffset), k.epoch, a.oneDevice);
      RINGGUARD_STEP_TAIL(kStepLastDone);
    }
    RINGGUARD_STEP_FLUSH(mine, k.epoch, last);
  }
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
