#pragma once
// Fault injection on the one-sided device path (docs/design/protocol.md, "Fault injection" of the one-sided
// protocol): what the kernels do to a chunk they read, from the same RINGGUARD_FAULT_* settings as the
// host-driven path, header-only so the host tests check the positions the kernels flip.
//
// A read of chunk c from rank p at epoch e is hit when hash(seed, e, c, p) < probability * 2^32 (the hash
// includes the device epoch, so a replayed graph injects anew). A hit damages, in registers, the first
// `attempts()` reads of that chunk (1; kRetransmit at least 2; RINGGUARD_FAULT_REPEAT more): more than
// maxRereads makes it persistent, and the collective fails naming the chunk. By mode:
//   bitflip, multibit, burst, retransmit   bits of the chunk's bytes (flips() lists them)
//   garbage                                every word of the chunk replaced (garbageWord())
//   trailer                                one bit of the CRC the reader compares against
//   control                                one bit of the fingerprint the reader compares against
//   delay                                  no damage: the producer publishes its chunks delayMs late
// Each damaged read is counted injected; each is caught (detected), so detected == injected.
#include <cstdint>

#include "core/corruption_plan.h"
#include "core/host_device.h"
#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {

struct PeerFault {
  double probability = 0;  // per chunk read
  uint32_t seed = 0;
  uint8_t mode = 0;       // FaultMode
  uint8_t bits = 1;       // kMultiBit: distinct bits, 1..64
  uint8_t burstBits = 8;  // kBurst: 2..32 consecutive bits
  uint8_t repeat = 1;     // reads of a hit chunk damaged (kRetransmit: at least 2)
  uint64_t delayNs = 0;   // kDelay

  // FaultMode's values, repeated so device code needs no options header.
  static constexpr uint8_t kBitFlip = 0, kMultiBit = 1, kBurst = 2, kGarbage = 3, kTrailer = 4,
                           kRetransmit = 5, kDelay = 6, kControl = 7;
  static constexpr int kMaxFlips = 64;
  static constexpr uint32_t kChunkBits = uint32_t(kChunkBytes) * 8;

  RINGGUARD_HOST_DEVICE bool on() const { return probability > 0; }
  RINGGUARD_HOST_DEVICE bool damagesReads() const { return on() && mode != kDelay; }
  RINGGUARD_HOST_DEVICE int attempts() const {
    const int r = repeat < 1 ? 1 : repeat;
    return mode == kRetransmit && r < 2 ? 2 : r;
  }
  // The hash of one read (chunk c from rank p at epoch e), and whether it is hit.
  RINGGUARD_HOST_DEVICE uint64_t hash(uint64_t epoch, uint32_t c, int p) const {
    return corruptionGarbageWord(seed, (epoch << 32) ^ (uint64_t(c) << 4) ^ uint64_t(uint32_t(p)));
  }
  RINGGUARD_HOST_DEVICE bool hits(uint64_t h) const {
    return double(uint32_t(h)) < probability * 4294967296.0;
  }

  // The chunk bits a hit with hash h flips (bit b is bit b % 8 of byte b / 8 of the chunk), distinct: for j
  // in [0, span(h)), bit position(h, j) when flipped(h, j). bitflip/retransmit: one bit; multibit: `bits`
  // bits with a stride prime to the chunk's bits; burst: 2..burstBits consecutive bits, the first and last
  // always, the others by the hash. (No array: a kernel indexing one by a runtime value would put it on the
  // stack.)
  RINGGUARD_HOST_DEVICE int span(uint64_t h) const {
    if (mode == kMultiBit) return bits < 1 ? 1 : (bits > kMaxFlips ? kMaxFlips : bits);
    if (mode == kBurst) {
      const int most = burstBits < 2 ? 2 : (burstBits > 32 ? 32 : burstBits);
      return 2 + int(uint32_t(h >> 16) % uint32_t(most - 1));  // 2..most (32-bit: no division call on a GPU)
    }
    return 1;
  }
  RINGGUARD_HOST_DEVICE uint32_t position(uint64_t h, int j) const {
    const uint32_t first = uint32_t(h >> 32) % kChunkBits;
    if (mode == kMultiBit) return (first + uint32_t(j) * 7919u) % kChunkBits;
    if (mode == kBurst) {
      const uint32_t len = uint32_t(span(h));
      return (first > kChunkBits - len ? kChunkBits - len : first) + uint32_t(j);
    }
    return first;
  }
  RINGGUARD_HOST_DEVICE bool flipped(uint64_t h, int j) const {
    if (mode != kBurst || j == 0 || j == span(h) - 1) return true;
    return ((corruptionGarbageWord(h, 1) >> j) & 1u) != 0;
  }
  // Word i (0..kChunkBytes / 4) of the garbage that replaces a chunk; word 0 never equals `old`.
  RINGGUARD_HOST_DEVICE static uint32_t garbageWord(uint64_t h, uint32_t i, uint32_t old) {
    const uint32_t g = uint32_t(corruptionGarbageWord(h, i));
    return (i == 0 && g == old) ? g ^ 1u : g;
  }
};

}  // namespace peer
}  // namespace ringguard
