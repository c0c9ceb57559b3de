#pragma once
// A telemetry source appends its signals to a sample. Sources are polled by the Sampler's thread; sources
// whose data comes from elsewhere (allocator statistics) are fed through their own thread-safe setter and
// only copy the last fed value here.
#include <cstdint>
#include <vector>

#include "ringguard/telemetry/signal.h"

namespace ringguard {

class TelemetrySource {
 public:
  virtual ~TelemetrySource() = default;
  virtual const char* name() const = 0;
  // Appends this source's signals as of `nowNs` (steady clock). Must not block for long: it runs on the
  // sampler's thread once per interval. Every signal the source declares is appended, present or missing.
  virtual void sample(int64_t nowNs, std::vector<Signal>* out) = 0;
};

}  // namespace ringguard
