#pragma once
// Integrity and traffic counters of a communicator (local to this rank).
#include <cstdint>
#include <functional>
#include <string>

namespace ringguard {

struct Counters {
  uint64_t collectives = 0;      // collectives completed successfully
  uint64_t bytesSent = 0;        // payload bytes posted to the transport (retransmissions included)
  uint64_t slicesSent = 0;       // framed slices sent (retransmissions included)
  uint64_t slicesVerified = 0;   // received slices checked against their trailer
  uint64_t injected = 0;         // corruptions injected into slices (or control frames) received here
  uint64_t detected = 0;         // link failures detected here (CRC, malformed or stale trailer, size;
                                 // control frames rejected by the control channel)
  uint64_t retransmitted = 0;    // slices this rank resent from its retained bytes (or re-read from the
                                 // publication a peer retains in its window)
  uint64_t escaped = 0;          // injected corruptions that passed verification (must stay 0)
  uint64_t delayed = 0;          // slices this rank sent late on purpose (fault injection)
  uint64_t repairRounds = 0;     // repair rounds run
  uint64_t controlFrames = 0;    // control frames this rank's collectives sent (fingerprints, verdicts)
  uint64_t controlBytes = 0;     // their bytes, headers included
  uint64_t nonFiniteInputs = 0;  // RINGGUARD_NAN_CHECK: collectives whose input here held NaN or +-Inf
  uint64_t skipped = 0;          // RINGGUARD_NAN_CHECK=skip: collectives every rank skipped
  // Where the progress thread's time went (nanoseconds), for the benchmarks' breakdown.
  uint64_t transferWaitNs = 0;  // waiting for slices to arrive or leave
  uint64_t applyNs = 0;         // verify + reduce/copy calls (host: the work itself; device: enqueueing it)
  uint64_t executorWaitNs = 0;  // waiting for the executor's queued work (device kernels) to finish

  Counters& operator+=(const Counters& o);
  // Field by field `*this - earlier` (counters only grow).
  Counters since(const Counters& earlier) const;
  // Every field with its snake_case name ("slices_verified", "apply_ns", ...), in declaration order.
  void forEach(const std::function<void(const char* name, uint64_t value)>& visit) const;
  std::string toString() const;
};

}  // namespace ringguard
