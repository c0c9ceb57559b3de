#pragma once
// Many CRC-32s on the device in two launches: the CUDA layer's public entry for the replica check's
// fingerprints (docs/REPLICAS.md), called by the torch bindings on torch's stream with torch's memory.
// CUDA-free (the stream handle is forward-declared), defined in ringguard::cuda.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringguard/core/status.h"

// Forward declaration of the runtime's stream handle, so this header does not need cuda_runtime_api.h.
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace ringguard {

// One buffer of crc32ManyDevice.
struct Crc32Span {
  const void* data;  // device address, any byte alignment; null only when bytes == 0
  size_t bytes;
};

// Bytes of temporary device storage crc32ManyDevice needs for these spans (depends on their sizes only).
size_t crc32ManyDeviceScratchBytes(const Crc32Span* spans, size_t n);

// crcsOutDevice[i] = the CRC-32 crc32Device gives for spans[i], for each of the `n` spans, in one launch of
// a persistent segment kernel (the tables filled once per block, not once per span; its blocks take the
// spans' segments largest first from a counter in the scratch) and one merge launch (a block per span), after
// two small host-to-device copies of the work table (pageable: staged when the call returns) and a memset of
// the counter. `scratch` must hold crc32ManyDeviceScratchBytes (16-byte aligned) and stay untouched until
// the stream has passed this work (two calls over one scratch must not overlap). The replica check's device
// fingerprint (docs/REPLICAS.md).
Status crc32ManyDevice(const Crc32Span* spans, size_t n, uint32_t* crcsOutDevice, void* scratch,
                       size_t scratchBytes, cudaStream_t stream);

// crc32ManyDevice kept between calls: the work table of a list of spans built and uploaded once, into device
// memory of its own (the device's stream-ordered pool), and reused while the spans stay the same (a
// model's parameters and optimizer state keep their addresses from step to step). A run with the same spans
// launches the two kernels and nothing else: no host-to-device copy, no planning, no allocation; one with
// other spans builds the table again first. A plan belongs to the device current at its first run (a run on
// another is refused), and each stream it runs on must outlive its next run (a run on another stream records
// an event on the last one) and the plan; a stream being captured into a CUDA graph is refused. Not
// thread-safe (one per checker; the replica check's).
class Crc32ManyPlan {
 public:
  // Work items per block the table cuts the spans into (crc32_many.cu, buildTables: fewer cost less
  // reduction, more leave a shorter tail); the default is what crc32ManyDevice uses, other values are for
  // bench_crc_many's sweep. At least 1. 2: the small GPT's 329 MB in 134.0 us on an H100 against 140.7 with
  // 4, 136.6-143.6 with 1, 147.6 with 8 (forty-eighth session, docs/PERFORMANCE.md).
  static constexpr uint32_t kDefaultItemsPerBlock = 2;
  explicit Crc32ManyPlan(uint32_t itemsPerBlock = kDefaultItemsPerBlock)
      : itemsPerBlock_(itemsPerBlock < 1 ? 1 : itemsPerBlock) {}
  // Frees its memory with cudaFree, which waits for the device (what read the CRCs after the last run
  // included): the checker's end, not a step.
  ~Crc32ManyPlan();
  Crc32ManyPlan(const Crc32ManyPlan&) = delete;
  Crc32ManyPlan& operator=(const Crc32ManyPlan&) = delete;

  // Enqueues the CRC-32 of each of the `n` spans on `stream`; *crcsDevice (n words, the plan's) holds them
  // once the stream has passed this work, until the next run overwrites them in that stream's order (a run
  // on another stream first waits, on the device, for what the last run's stream held when it was called).
  Status run(const Crc32Span* spans, size_t n, cudaStream_t stream, const uint32_t** crcsDevice);
  // The same CRCs written into a message of `numWords` words that the plan keeps on the device (the replica
  // check's, docs/REPLICAS.md "What one check does"): the words of `hostWords` first (numWords of them,
  // read before the call returns, so they may change at once: up to 960 passed with the segment launch and
  // written by its first block, more copied from the host), then span i's CRC written over word
  // positions[i] by the merge kernel itself: no scatter, no index on the device. Positions are distinct and
  // below numWords (else kInvalidArgument) and part of what the table is kept for; n may be 0. The message
  // (*messageDevice) holds this until the next run writes it, in stream order as run's CRCs.
  // `into`, when given, is where the message goes instead (numWords 4-byte-aligned words of device memory on
  // the plan's device, the caller's, valid until the stream has passed the run; part of what the table is
  // kept for, so a run into another buffer builds it again): the replica check's own block of the buffer
  // its all-gather fills in place.
  Status runMessage(const Crc32Span* spans, const uint32_t* positions, size_t n, const uint32_t* hostWords,
                    size_t numWords, cudaStream_t stream, const uint32_t** messageDevice,
                    uint32_t* into = nullptr);
  // How many times a run built and uploaded the table (tests: 1 while the spans stay the same).
  uint64_t builds() const { return builds_; }

 private:
  bool sameTable(const Crc32Span* spans, const uint32_t* positions, size_t n, size_t numWords,
                 const uint32_t* into) const;
  // run and runMessage: positions null for 0..n-1, hostWords null for no copy, into null for the plan's own.
  Status enqueue(const Crc32Span* spans, const uint32_t* positions, size_t n, const uint32_t* hostWords,
                 size_t numWords, cudaStream_t stream, const uint32_t** out, uint32_t* into);

  std::vector<Crc32Span> spans_;     // what the table was built for
  std::vector<uint32_t> positions_;  // and where it writes each CRC (empty: 0..n-1)
  size_t numWords_ = 0;              // in a message of this many words
  void* memory_ = nullptr;           // items, merge arguments, partials, then the CRCs or message
  const void* items_ = nullptr;
  const void* args_ = nullptr;
  uint32_t* partials_ = nullptr;
  uint32_t* counters_ = nullptr;    // the segment kernel's item counter and blocks done
  uint32_t* words_ = nullptr;       // the CRCs, or the message they are written into (the plan's or `into`)
  const uint32_t* into_ = nullptr;  // the caller's message buffer the table was built for (null: none)
  uint32_t numItems_ = 0;
  uint32_t itemsPerBlock_;
  int resident_ = 0;  // blocks per launch the table was planned for
  int device_ = -1;   // current at the first run
  uint64_t builds_ = 0;
  cudaStream_t stream_ = nullptr;  // of the last run
  cudaEvent_t done_ = nullptr;     // recorded on the last stream when a run comes on another
};

}  // namespace ringguard
