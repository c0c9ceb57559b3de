#pragma once
// Verdict records and the repair planner (docs/design/protocol.md, "Verdicts and repair").
#include <cstdint>
#include <string>
#include <vector>

#include "core/trailer.h"

namespace ringguard {

// A link failure seen by a receiver. Fixed-size so verdict lists travel as plain arrays.
struct SliceFailure {
  uint32_t column = 0;
  uint32_t slice = 0;
  uint32_t step = 0;
  int32_t sender = 0;
  int32_t receiver = 0;
  uint8_t reason = 0;  // SliceCheck
  uint8_t pad[3] = {0, 0, 0};
};
static_assert(sizeof(SliceFailure) == 24, "verdict entries are a fixed wire format");

// "link 1 -> 2, step 3, slice 7, column 0: payload CRC mismatch"
std::string describeFailure(const SliceFailure& f);

// One (column, slice) to replay from `fromStep` to the last step.
struct ReplayEntry {
  uint32_t column = 0;
  uint32_t slice = 0;
  uint32_t fromStep = 0;
  bool operator==(const ReplayEntry& o) const {
    return column == o.column && slice == o.slice && fromStep == o.fromStep;
  }
};

// Every rank computes the same plan from the same global failure list: one entry per failed
// (column, slice), starting at its earliest failed step, sorted by (column, slice).
std::vector<ReplayEntry> planRepair(const std::vector<SliceFailure>& failures);

// Sorted, deduplicated union (the order in which verdict lists arrive does not matter).
std::vector<SliceFailure> canonicalFailures(std::vector<SliceFailure> failures);

}  // namespace ringguard
