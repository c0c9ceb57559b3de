#include "core/fault_injector.h"

#include <algorithm>
#include <random>
#include <string>
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

std::string entryText(const FaultScheduleEntry& e) {
  return std::to_string(e.collective) + ":" + std::to_string(e.step) + ":" + std::to_string(e.slice) + ":" +
         std::to_string(e.rank);
}

}  // namespace

Status makeFaultInjector(const Options& options, int worldSize, const FaultOptions& fault,
                         std::shared_ptr<const FaultInjector>* out) {
  Options check = options;
  check.fault = fault;
  RINGGUARD_RETURN_IF_ERROR(check.validateFor(worldSize));
  *out = std::make_shared<const FaultInjector>(fault);
  return Status::ok();
}

Status checkFaultSchedule(const FaultOptions& fault, int worldSize) {
  const bool control = fault.mode == FaultMode::kControl;
  // Allreduce's ring has the most steps of any plan. In 64 bits: 2 (worldSize - 1) overflows an int past
  // 2^30 ranks (found by tests/fuzz/fuzz_fault_schedule.cc).
  const int64_t steps = std::max<int64_t>(1, 2 * (int64_t(worldSize) - 1));
  for (const FaultScheduleEntry& e : fault.schedule) {
    std::string why;
    if (e.rank < 0 || e.rank >= worldSize) {
      why = std::string(control ? "receiver " : "rank ") + std::to_string(e.rank) + " does not exist";
    } else if (control && (e.step < 1 || e.step > 3)) {
      why = "tag " + std::to_string(e.step) + " is not a control tag (1 fingerprint, 2 verdict, 3 error)";
    } else if (control && (e.slice < 0 || e.slice >= worldSize || e.slice == e.rank)) {
      why = "sender " + std::to_string(e.slice) +
            (e.slice == e.rank ? " is the receiver itself" : " does not exist");
    } else if (!control && (e.step < 0 || e.step >= steps)) {
      why = "step " + std::to_string(e.step) + " does not exist (collectives have steps 0.." +
            std::to_string(steps - 1) + ")";
    }
    if (!why.empty()) {
      return Status(StatusCode::kInvalidArgument, "RINGGUARD_FAULT_SCHEDULE entry " + entryText(e) +
                                                      " can never fire on " + std::to_string(worldSize) +
                                                      " rank(s): " + why);
    }
  }
  return Status::ok();
}

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
  if (!enabled() || options_.mode == FaultMode::kDelay || options_.mode == FaultMode::kControl) return false;
  return attempt < repeatCount() && selected(seq, step, slice, receiver);
}

int FaultInjector::delayMs(uint64_t seq, int step, int slice, int receiver, int attempt) const {
  if (!enabled() || options_.mode != FaultMode::kDelay) return 0;
  return (attempt < repeatCount() && selected(seq, step, slice, receiver)) ? options_.delayMs : 0;
}

bool FaultInjector::corruptsControl(uint64_t seq, int tag, int sender, int receiver) const {
  return enabled() && options_.mode == FaultMode::kControl && selected(seq, tag, sender, receiver);
}

bool FaultInjector::corruptControl(uint64_t seq, int tag, int sender, int receiver, uint8_t* frame,
                                   size_t bytes) const {
  if (bytes == 0) return false;
  std::mt19937_64 rng(hashOf(options_.seed, seq, tag, sender, receiver, 0));
  flipBit(frame, rng() % (bytes * 8));
  return true;
}

bool FaultInjector::corrupt(uint64_t seq, int step, int slice, int receiver, int attempt, uint8_t* payload,
                            size_t bytes, Trailer* trailer) const {
  return applyCorruptionPlan(plan(seq, step, slice, receiver, attempt, bytes), payload, trailer);
}

// The random draws are those the host-side corrupt() always made (one mt19937_64 per transfer), so every mode
// but garbage flips exactly the bits it flipped before the plans; only garbage is now a counter-based
// expansion of one draw (a kernel cannot replay a sequential generator per byte).
CorruptionPlan FaultInjector::plan(uint64_t seq, int step, int slice, int receiver, int attempt,
                                   size_t bytes) const {
  CorruptionPlan plan;
  plan.bytes = bytes;
  std::mt19937_64 rng(hashOf(options_.seed, seq, step, slice, receiver, attempt));
  const size_t bits = bytes * 8;
  std::vector<size_t> flips;  // bit positions (byte * 8 + bit, LSB first), each at most once
  switch (options_.mode) {
    case FaultMode::kBitFlip:
    case FaultMode::kRetransmit:
      if (bits == 0) return plan;
      flips.push_back(rng() % bits);
      break;
    case FaultMode::kMultiBit: {
      if (bits == 0) return plan;
      // fault.bits is validated to [1, 64]; the clamp keeps an unvalidated value within the plan's edits.
      const size_t wanted = size_t(std::clamp(options_.bits, 1, CorruptionPlan::kMaxEdits));
      const size_t k = std::min(wanted, bits);
      while (flips.size() < k) {
        size_t b = rng() % bits;
        if (std::find(flips.begin(), flips.end(), b) == flips.end()) flips.push_back(b);
      }
      break;
    }
    case FaultMode::kBurst: {
      if (bits < 2) return plan;
      const int burstBits = std::clamp(options_.burstBits, 2, 32);  // validated to [2, 32]: <= 5 bytes
      size_t len = 2 + rng() % size_t(std::max(1, burstBits - 1));  // 2..burstBits
      len = std::min(len, bits);
      size_t start = rng() % (bits - len + 1);
      // First and last bit always flip, so the burst really has that length; inner bits at random.
      flips.push_back(start);
      flips.push_back(start + len - 1);
      for (size_t b = start + 1; b + 1 < start + len; ++b) {
        if (rng() & 1) flips.push_back(b);
      }
      break;
    }
    case FaultMode::kGarbage:
      if (bytes == 0) return plan;
      plan.target = CorruptionPlan::Target::kPayload;
      plan.garbage = true;
      plan.seed = rng();
      return plan;
    case FaultMode::kTrailer:
      plan.target = CorruptionPlan::Target::kTrailer;
      flips.push_back(rng() % (sizeof(Trailer) * 8));
      break;
    default:  // kDelay and the control-frame mode damage no slice
      return plan;
  }
  if (options_.mode != FaultMode::kTrailer) plan.target = CorruptionPlan::Target::kPayload;
  // Byte edits, ascending; flips are distinct bits, so no mask cancels out.
  std::sort(flips.begin(), flips.end());
  for (size_t b : flips) {
    if (plan.edits == 0 || plan.offset[plan.edits - 1] != b / 8) {
      plan.offset[plan.edits] = b / 8;
      plan.mask[plan.edits] = 0;
      ++plan.edits;
    }
    plan.mask[plan.edits - 1] ^= uint8_t(1u << (b % 8));
  }
  return plan;
}

}  // namespace ringguard
