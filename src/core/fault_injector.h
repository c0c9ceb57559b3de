#pragma once
// Fault injection: a product feature, off by default. Decisions are pure functions of
// (seed, seq, step, slice, receiving rank, attempt), so no coordination is needed and runs replay exactly.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/corruption_plan.h"
#include "core/trailer.h"
#include "ringguard/core/options.h"

namespace ringguard {

// kInvalidArgument naming the first schedule entry of `fault` that can never fire on a communicator of
// `worldSize` ranks: a receiving rank outside [0, worldSize), a ring step no collective has (every plan has
// fewer than max(1, 2 (worldSize - 1)) steps), or, in control mode, a tag other than 1..3 or a sender outside
// the group or equal to the receiver. Slices and collective numbers depend on the calls, so any is accepted.
Status checkFaultSchedule(const FaultOptions& fault, int worldSize);

class FaultInjector;

// What setFault does before it swaps injectors (the Communicator's and the c10d backend's point-to-point
// lanes' alike): `fault` checked together with the rest of `options` for a group of `worldSize` ranks
// (Options::validateFor: a bad value is a kInvalidArgument naming it, and *out is left as it was), then the
// injector that applies it.
Status makeFaultInjector(const Options& options, int worldSize, const FaultOptions& fault,
                         std::shared_ptr<const FaultInjector>* out);

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

  // The damage the configured mode does to the transfer of (seq, step, slice) into `receiver` at `attempt`,
  // a payload of `bytes` bytes, computed without the payload: applied in executor order by
  // Executor::corruptReceived (a kernel on a device executor's stream). Call it where corrupts() is true;
  // plan.damages() is false when nothing can be damaged (an empty payload in a payload mode): nothing is
  // injected then.
  CorruptionPlan plan(uint64_t seq, int step, int slice, int receiver, int attempt, size_t bytes) const;
  // plan() applied to host memory at once (applyCorruptionPlan). Returns true when bytes changed.
  bool corrupt(uint64_t seq, int step, int slice, int receiver, int attempt, uint8_t* payload, size_t bytes,
               Trailer* trailer) const;

  // Fault mode control: is control frame number `seq` of `tag` from `sender` into `receiver` hit? Schedule
  // entries read as (collective = seq, step = tag, slice = sender, rank = receiver).
  bool corruptsControl(uint64_t seq, int tag, int sender, int receiver) const;
  // Flips one bit of a received control frame (header or body) in place; false for an empty frame.
  bool corruptControl(uint64_t seq, int tag, int sender, int receiver, uint8_t* frame, size_t bytes) const;

 private:
  bool selected(uint64_t seq, int step, int slice, int receiver) const;
  int repeatCount() const;

  FaultOptions options_;
};

}  // namespace ringguard
