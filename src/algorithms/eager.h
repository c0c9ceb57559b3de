#pragma once
// Small collectives in one round (docs/design/protocol.md, "Small collectives in one round"): at N <= 3 a
// collective whose payloads fit one slice and the transport's eager limit sends each peer its payload inside
// its fingerprint frame, so the data costs no round of its own; damaged frames are repaired in verdict
// rounds as ring slices are. Private to the algorithms layer: a group collective asks runsEager, runs
// eagerExchange and builds its result from the payloads.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/executor.h"
#include "core/fingerprint.h"

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

// Whether a collective whose largest payload from one rank to one peer is `maxPayload` (> 0) bytes runs in
// one round: 2 <= N <= 3, host memory, maxPayload within the slice size and Transport::eagerBytes. Every
// input is something the ranks agreed on (the fingerprint's count and dtype, N, the handshake's slice size),
// so ranks whose fingerprints agree choose alike.
bool runsEager(const CollectiveContext& ctx, const Executor& exec, size_t maxPayload);

// What this rank sends one peer (nothing: bytes 0).
struct EagerPayload {
  const void* data = nullptr;
  size_t bytes = 0;
};

// Sends out[p] to every peer p in this rank's fingerprint frame (`mine`) and takes every peer's frame,
// expecting inBytes[p] payload bytes from peer p; compares every rank's fingerprint (a kFingerprintMismatch
// naming both sides, as exchangeFingerprints); checks each payload as a ring slice (step 0, slice 0, column
// = its sender) and repairs damaged frames in verdict rounds (kCorruption after maxRetries, the same on
// every rank). OK only once every rank holds every payload intact: (*in)[p] then holds peer p's payload.
// Adds to ctx.counters.
Status eagerExchange(const CollectiveContext& ctx, const Fingerprint& mine,
                     const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                     std::vector<std::vector<uint8_t>>* in);

// eagerExchange where every rank sends every peer the same `bytes` at `data` (all-reduce, all-gather).
Status eagerExchangeAll(const CollectiveContext& ctx, const Fingerprint& mine, const void* data, size_t bytes,
                        std::vector<std::vector<uint8_t>>* in);

}  // namespace ringguard
