#pragma once
// Fault injection: a product feature, off by default. Decisions are pure functions of
// (seed, seq, step, slice, receiving rank, attempt), so no coordination is needed and runs replay exactly.
#include <cstddef>
#include <cstdint>

#include "ringguard/core/options.h"
#include "ringguard/core/trailer.h"

namespace ringguard {

class FaultInjector {
 public:
  FaultInjector() = default;
  explicit FaultInjector(const FaultOptions& options) : options_(options) {}

  bool enabled() const { return options_.enabled(); }
  const FaultOptions& options() const { return options_; }

  // Is the transfer of (seq, step, slice) into `receiver` at `attempt` hit by a corruption?
  bool corrupts(uint64_t seq, int step, int slice, int receiver, int attempt) const;
  // Milliseconds the sender waits before posting this transfer (kDelay mode), else 0.
  int delayMs(uint64_t seq, int step, int slice, int receiver, int attempt) const;

  // Damages a received slice in place as the configured mode says. Returns true when bytes changed
  // (an empty payload cannot be damaged by the payload modes: nothing is injected then).
  bool corrupt(uint64_t seq, int step, int slice, int receiver, int attempt, uint8_t* payload, size_t bytes,
               Trailer* trailer) const;

 private:
  bool selected(uint64_t seq, int step, int slice, int receiver) const;
  int repeatCount() const;

  FaultOptions options_;
};

}  // namespace ringguard
