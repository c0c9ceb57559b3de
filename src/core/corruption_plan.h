#pragma once
// What one injected fault does to one received slice (docs/design/protocol.md, "Fault injection"), decided
// by FaultInjector::plan from (seed, seq, step, slice, receiver, attempt, bytes) without reading the payload,
// so that an executor can apply it in its own order: the host executor directly (applyCorruptionPlan), the
// device executor as a kernel on its stream (corruptDevice, src/cuda/fault_kernel.cu), with no host wait.
//
// A plan is a fixed-size value (no heap), so it can be passed to a kernel as its argument. The garbage
// expansion is a counter-based hash shared by host and device (RINGGUARD_HOST_DEVICE): byte i of the
// garbage depends only on (seed, i), so any thread can produce any byte.
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "core/trailer.h"

namespace ringguard {

struct CorruptionPlan {
  enum class Target : uint8_t {
    kNone = 0,  // nothing to damage (an empty payload in a payload mode, the delay mode)
    kPayload,   // the received payload: byte edits, or garbage
    kTrailer,   // the received trailer (slot index's): byte edits within its 40 bytes
  };
  // Multibit flips at most 64 distinct bits (fault.bits is in [1, 64]), a burst of <= 32 bits spans at most
  // 5 bytes, the other modes flip one bit: 64 byte edits cover every mode.
  static constexpr int kMaxEdits = 64;

  Target target = Target::kNone;
  bool garbage = false;             // kPayload: every byte replaced by garbageByte(seed, i, old byte)
  uint16_t edits = 0;               // byte edits below, distinct offsets, ascending
  uint64_t seed = 0;                // garbage
  uint64_t bytes = 0;               // the payload size the plan was made for
  uint64_t offset[kMaxEdits] = {};  // byte offsets into the payload (kPayload) or the trailer (kTrailer)
  uint8_t mask[kMaxEdits] = {};     // XORed into those bytes (never 0)

  // True when applying the plan changes bytes (what the algorithm counts as injected).
  RINGGUARD_HOST_DEVICE bool damages() const { return target != Target::kNone; }
};

// splitmix64 at counter `word` of the stream seeded with `seed` (the finaliser of seed + (word + 1) * gamma).
RINGGUARD_HOST_DEVICE constexpr uint64_t corruptionGarbageWord(uint64_t seed, uint64_t word) {
  uint64_t x = seed + (word + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Byte `i` of the garbage that replaces a payload: byte i % 8 (little-endian) of word i / 8. Byte 0 is forced
// to differ from what it replaces (`old`), so garbage never leaves a slice intact, whatever its size; the
// only byte a plan application reads.
RINGGUARD_HOST_DEVICE constexpr uint8_t corruptionGarbageByte(uint64_t seed, uint64_t i, uint8_t old) {
  const uint8_t g = static_cast<uint8_t>(corruptionGarbageWord(seed, i >> 3) >> (8 * (i & 7)));
  return (i == 0 && g == old) ? static_cast<uint8_t>(g ^ 1u) : g;
}

// Host application: damages `payload` (plan.bytes bytes, host memory) and `trailer` as the plan says.
// `trailer` may be null for payload plans, `payload` for trailer plans. Returns plan.damages().
inline bool applyCorruptionPlan(const CorruptionPlan& plan, uint8_t* payload, Trailer* trailer) {
  uint8_t* base = nullptr;
  if (plan.target == CorruptionPlan::Target::kPayload) base = payload;
  if (plan.target == CorruptionPlan::Target::kTrailer) base = reinterpret_cast<uint8_t*>(trailer);
  if (base == nullptr) return false;
  if (plan.garbage) {
    for (uint64_t i = 0; i < plan.bytes; ++i) base[i] = corruptionGarbageByte(plan.seed, i, base[i]);
  }
  for (int k = 0; k < plan.edits && k < CorruptionPlan::kMaxEdits; ++k) base[plan.offset[k]] ^= plan.mask[k];
  return true;
}

// Whether a plan fits a received payload of `bytes` bytes: every edit inside its target, a payload plan made
// for that size. What executors check before applying one.
inline bool corruptionPlanFits(const CorruptionPlan& plan, size_t bytes) {
  if (plan.edits > CorruptionPlan::kMaxEdits) return false;
  switch (plan.target) {
    case CorruptionPlan::Target::kNone:
      return true;
    case CorruptionPlan::Target::kPayload:
      if (plan.bytes != bytes) return false;
      break;
    case CorruptionPlan::Target::kTrailer:
      if (plan.garbage) return false;
      break;
    default:
      return false;
  }
  const uint64_t limit = plan.target == CorruptionPlan::Target::kTrailer ? sizeof(Trailer) : plan.bytes;
  for (int k = 0; k < plan.edits; ++k) {
    if (plan.offset[k] >= limit || plan.mask[k] == 0) return false;
  }
  return true;
}

}  // namespace ringguard
