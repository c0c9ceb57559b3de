#pragma once
// Small collectives in one round (docs/design/protocol.md, "Small collectives in one round"): at N <= 3 a
// collective whose payloads fit one slice and the transport's eager limit sends each peer its payload inside
// its fingerprint frame, so the data costs no round of its own; damaged frames are repaired in verdict
// rounds as ring slices are. Private to the algorithms layer: a group collective asks runsEager, runs
// eagerExchange and builds its result from the payloads; a small send/recv (sendrecv.cc) sends its payload
// in its fingerprint message with the same extension, check and repair (fitsEager, appendEagerPayload,
// parseEagerExtension, verifyEagerPayload).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "algorithms/agreement.h"
#include "core/fingerprint.h"
#include "core/trailer.h"
#include "executor/executor.h"

namespace ringguard {

inline constexpr uint32_t kEagerMagic = 0x31454752;  // "RGE1"

// Follows the fingerprint summary in a frame that carries a payload; then the payload's Trailer and the
// payload itself.
struct EagerHeader {
  uint32_t magic;
  uint32_t payloadBytes;
};
static_assert(sizeof(EagerHeader) == 8, "eager frames are a fixed wire format");

// Whether the `size` bytes at `body` are `summaryBytes` of summary followed by an EagerHeader.
inline bool isEagerExtension(const uint8_t* body, size_t size, size_t summaryBytes) {
  if (size < summaryBytes + sizeof(EagerHeader)) return false;
  uint32_t magic = 0;
  std::memcpy(&magic, body + summaryBytes, sizeof(magic));
  return magic == kEagerMagic;
}

// Whether a payload of `bytes` (> 0) may travel inside a control frame: host memory, within the slice size
// and Transport::eagerBytes. Every input is something the two ends agreed on (the fingerprint's count and
// dtype, the handshake's slice size), so ends whose fingerprints agree choose alike.
bool fitsEager(const CollectiveContext& ctx, const Executor& exec, size_t bytes);

// Whether a collective whose largest payload from one rank to one peer is `maxPayload` bytes runs in one
// round: 2 <= N <= 3 (every control exchange is then one round to every peer) and fitsEager(maxPayload).
bool runsEager(const CollectiveContext& ctx, const Executor& exec, size_t maxPayload);

// The eager extension of a frame: EagerHeader, the payload's Trailer (slice `id`), the payload. Counts the
// slice as sent.
void appendEagerPayload(std::vector<uint8_t>* body, const SliceId& id, const void* data, size_t bytes,
                        Counters* counters);

// The extension at `at` of a received frame: false when its header does not match the frame's size.
struct EagerView {
  uint8_t* payload = nullptr;
  size_t bytes = 0;
  Trailer trailer{};
};
bool parseEagerExtension(std::vector<uint8_t>* frame, size_t at, EagerView* view);

// Checks a received payload as the ring slice `expected`, on the receiving rank: data-mode fault injection
// first (keyed as the pipeline's slice (seq, step, slice, this rank, attempt), `attempt` the expected one's
// unless given: a window's chunk is re-read with its trailer unchanged), then its trailer. Counts the slice
// verified, and a link failure as detected.
SliceCheck verifyEagerPayload(const CollectiveContext& ctx, const SliceId& expected, const EagerView& view,
                              Counters* counters, int attempt = -1);

// What this rank sends one peer (nothing: bytes 0).
struct EagerPayload {
  const void* data = nullptr;
  size_t bytes = 0;
};

// The small collectives keep the vectors they pass to these exchanges (and the window exchange its own) per
// thread, each use site its own function-local thread_local, assigned afresh on every call: a collective
// never runs inside another on one thread, and once a thread made one of a group's size, a call allocates
// nothing. Those vectors were six to eight allocations and frees per call, about a sixth of a 4 KiB
// all-gather's instructions on the one-sided path (docs/PERFORMANCE.md, "Thirtieth session").

// Sends out[p] to every peer p in this rank's fingerprint frame (`mine`) and takes every peer's frame,
// expecting inBytes[p] payload bytes from peer p; compares every rank's fingerprint (a kFingerprintMismatch
// naming both sides, as exchangeFingerprints); checks each payload as a ring slice (step 0, slice 0, column
// = its sender) and repairs damaged frames in verdict rounds (kCorruption after maxRetries, the same on
// every rank). OK only once every rank holds every payload intact: (*in)[p] then holds peer p's payload.
// Adds to ctx.counters.
Status eagerExchange(const CollectiveContext& ctx, const Fingerprint& mine,
                     const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                     std::vector<std::vector<uint8_t>>* in);

}  // namespace ringguard
