#pragma once
// The telemetry model: a Sample is a set of named Signals read at one time. A signal whose source could
// not be read (no NVML, a field the device does not support, allocator stats never fed) is present in the
// sample with `missing` set and the reason in `why`: a missing value is never replaced by a made-up one.
#include <cstdint>
#include <string>
#include <vector>

namespace ringguard {

struct Signal {
  std::string name;    // dotted: "<source>.<quantity>", e.g. "pcie.util", "torch.fragmentation"
  double value = 0.0;  // meaningless when missing
  std::string unit;    // "bytes", "bytes/s", "fraction", "count", "bool"
  std::string source;  // the TelemetrySource that produced it: "nvml", "pool.device", "torch"
  bool missing = false;
  std::string why;  // why it is missing (empty otherwise)

  static Signal present(std::string name, double value, std::string unit, std::string source);
  static Signal absent(std::string name, std::string unit, std::string source, std::string why);
};

struct Sample {
  int64_t timeNs = 0;  // steady clock of the sampling process (monotonic, not comparable across hosts)
  std::vector<Signal> signals;

  // The signal named `name`, or nullptr when no source reported it at all.
  const Signal* find(const std::string& name) const;
  // Adds or replaces the signal of the same name.
  void set(Signal s);
  // "name=value unit" for present signals, "name=missing(why)" otherwise; ordered as stored.
  std::string toString() const;
};

}  // namespace ringguard
