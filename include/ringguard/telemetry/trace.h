#pragma once
// Recorded telemetry as JSON lines, one sample per line, so the policy engine can be replayed
// deterministically on CPU (tests) and a run's signals can be kept next to its decisions:
//   {"t_ms": 120, "signals": {"pcie.util": 0.93, "torch.fragmentation": null}}
// A null value is a missing signal; an optional "missing" object maps names to the reason:
//   {"t_ms": 140, "signals": {"pcie.util": null}, "missing": {"pcie.util": "NVML not available"}}
// "step" (integer) may be given to mark the step boundary the sample belongs to; lines that are empty or
// start with '#' are skipped.
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/telemetry/signal.h"

namespace ringguard {

struct TraceRecord {
  Sample sample;        // timeNs = t_ms * 1e6
  long long step = -1;  // -1 when the line has no "step"
};

// kInvalidArgument naming the line (1-based), the key and the problem.
Status parseTraceLine(const std::string& line, int lineNo, TraceRecord* out);
Status readTrace(const std::string& path, std::vector<TraceRecord>* out);
std::string traceLine(const Sample& s, long long step = -1);

}  // namespace ringguard
