#include "ringguard/core/fault_injector.h"

#include <algorithm>
#include <random>
#include <vector>

namespace ringguard {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hashOf(uint64_t seed, uint64_t seq, int step, int slice, int receiver, int attempt) {
  uint64_t h = mix(seed);
  for (uint64_t v : {seq, uint64_t(uint32_t(step)), uint64_t(uint32_t(slice)), uint64_t(uint32_t(receiver)),
                     uint64_t(uint32_t(attempt))}) {
    h = mix(h ^ v);
  }
  return h;
}

void flipBit(uint8_t* p, size_t bit) { p[bit / 8] ^= uint8_t(1u << (bit % 8)); }

}  // namespace

bool FaultInjector::selected(uint64_t seq, int step, int slice, int receiver) const {
  for (const FaultScheduleEntry& e : options_.schedule) {
    if (e.collective == seq && e.step == step && e.slice == slice && e.rank == receiver) return true;
  }
  if (options_.probability <= 0.0) return false;
  // 53 random bits -> uniform double in [0, 1).
  double u = double(hashOf(options_.seed, seq, step, slice, receiver, -1) >> 11) * (1.0 / 9007199254740992.0);
  return u < options_.probability;
}

int FaultInjector::repeatCount() const {
  return options_.mode == FaultMode::kRetransmit ? std::max(2, options_.repeat) : options_.repeat;
}

bool FaultInjector::corrupts(uint64_t seq, int step, int slice, int receiver, int attempt) const {
  if (!enabled() || options_.mode == FaultMode::kDelay) return false;
  return attempt < repeatCount() && selected(seq, step, slice, receiver);
}

int FaultInjector::delayMs(uint64_t seq, int step, int slice, int receiver, int attempt) const {
  if (!enabled() || options_.mode != FaultMode::kDelay) return 0;
  return (attempt < repeatCount() && selected(seq, step, slice, receiver)) ? options_.delayMs : 0;
}

bool FaultInjector::corrupt(uint64_t seq, int step, int slice, int receiver, int attempt, uint8_t* payload,
                            size_t bytes, Trailer* trailer) const {
  std::mt19937_64 rng(hashOf(options_.seed, seq, step, slice, receiver, attempt));
  const size_t bits = bytes * 8;
  switch (options_.mode) {
    case FaultMode::kBitFlip:
    case FaultMode::kRetransmit:
      if (bits == 0) return false;
      flipBit(payload, rng() % bits);
      return true;
    case FaultMode::kMultiBit: {
      if (bits == 0) return false;
      size_t k = std::min<size_t>(size_t(options_.bits), bits);
      std::vector<size_t> chosen;
      while (chosen.size() < k) {
        size_t b = rng() % bits;
        if (std::find(chosen.begin(), chosen.end(), b) == chosen.end()) chosen.push_back(b);
      }
      for (size_t b : chosen) flipBit(payload, b);
      return true;
    }
    case FaultMode::kBurst: {
      if (bits < 2) return false;
      size_t len = 2 + rng() % size_t(std::max(1, options_.burstBits - 1));  // 2..burstBits
      len = std::min(len, bits);
      size_t start = rng() % (bits - len + 1);
      // First and last bit always flip, so the burst really has that length; inner bits at random.
      flipBit(payload, start);
      flipBit(payload, start + len - 1);
      for (size_t b = start + 1; b + 1 < start + len; ++b) {
        if (rng() & 1) flipBit(payload, b);
      }
      return true;
    }
    case FaultMode::kGarbage: {
      if (bytes == 0) return false;
      bool changed = false;
      for (size_t i = 0; i < bytes; ++i) {
        uint8_t g = uint8_t(rng());
        changed |= (g != payload[i]);
        payload[i] = g;
      }
      if (!changed) flipBit(payload, 0);  // never leave the slice intact: it must count as a corruption
      return true;
    }
    case FaultMode::kTrailer:
      flipBit(reinterpret_cast<uint8_t*>(trailer), rng() % (sizeof(Trailer) * 8));
      return true;
    case FaultMode::kDelay:
      return false;
  }
  return false;
}

}  // namespace ringguard
