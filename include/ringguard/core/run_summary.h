#pragma once
// What one communicator did over its life: the run summary (RINGGUARD_SUMMARY, ringguard.summary()).
#include <cstdint>
#include <map>
#include <string>

#include "ringguard/core/counters.h"

namespace ringguard {

// One collective kind's calls on this rank.
struct CollectiveStats {
  uint64_t calls = 0;   // run (ok or not)
  uint64_t failed = 0;  // of which returned an error
  uint64_t bytes = 0;   // payload bytes of the calls (the caller's buffer: count x element size; all-gather:
                        // the output, as nccl-tests counts it)
  uint64_t ns = 0;      // time from start to end on the runner
};

struct CommunicatorSummary {
  uint32_t track = 0;  // the communicator's timeline track
  int rank = 0;
  int size = 0;
  std::string transport;
  bool live = true;                               // false once the communicator was destroyed
  std::map<std::string, CollectiveStats> byKind;  // "allreduce", "allgather", ...
  Counters counters;
  std::string firstError;  // empty when none
};

}  // namespace ringguard
