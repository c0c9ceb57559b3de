#pragma once
// The guard's own fault injection, off by default: writes NaN, +Inf, -Inf or a large finite value into an
// output of chosen guarded calls, as a transient fault (the first attempts of a call) or a persistent one.
// Decisions are pure functions of (seed, op, call index, attempt), so a run replays exactly.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/guard/backend.h"

namespace ringguard {

struct GuardFaultRule {
  std::string op;     // op name; empty matches every op
  int64_t call = -1;  // the op's call index (0-based, per op name); -1 matches every call
  int attempts = 1;   // attempts hit, from the first: 1 = transient; a large value = persistent
  int output = 0;     // which target is written: the op's outputs, then its state tensors; -1: every target
  uint64_t element = 0;  // element index (taken modulo the output's count)
  FaultValue value = FaultValue::kNaN;
  double probability = 1.0;  // < 1: each matching (call, output) is hit with this probability
};

struct GuardFaultHit {
  int output;  // index into the op's outputs followed by its state tensors
  uint64_t element;
  FaultValue value;
};

class GuardFaultInjector {
 public:
  void setSeed(uint64_t seed);
  // kInvalidArgument, naming the field and its value, for a rule that could never fire as written
  // (attempts < 1, probability outside [0, 1]) or names no target (call or output below -1).
  Status addRule(const GuardFaultRule& rule);
  void clear();
  bool enabled() const;
  // The writes for attempt `attempt` (0 = first run) of call `call` of `op`, which has `targets` targets
  // (outputs + state tensors).
  std::vector<GuardFaultHit> hits(const std::string& op, uint64_t call, int attempt, size_t targets) const;

 private:
  mutable std::mutex mu_;
  uint64_t seed_ = 0;                  // guarded by mu_
  std::vector<GuardFaultRule> rules_;  // guarded by mu_
};

}  // namespace ringguard
