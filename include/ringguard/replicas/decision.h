#pragma once
// What the replica check does about a mismatch (docs/REPLICAS.md): raise, repair from the majority, or
// warn; a rank that mismatches again after a repair escalates to raise. Decided from the comparison and
// this object's memory of past repairs, which every rank keeps alike, so every rank decides the same.
#include <cstdint>
#include <map>
#include <string>

#include "ringguard/core/status.h"
#include "ringguard/replicas/comparison.h"

namespace ringguard {

enum class ReplicaAction : uint8_t { kNone = 0, kWarn, kRepair, kRaise };
const char* replicaActionName(ReplicaAction a);  // "none", "warn", "repair", "raise"
// The on_mismatch policies: "raise", "repair", "warn" (kNone is not a policy).
bool parseReplicaPolicy(const std::string& s, ReplicaAction* out);

struct ReplicaDecision {
  ReplicaAction action = ReplicaAction::kNone;
  bool escalated = false;  // the policy said repair, the decision is raise
  std::string reason;      // why (escalations, structural mismatches); empty for the plain policy
};

class ReplicaDecider {
 public:
  explicit ReplicaDecider(ReplicaAction policy) : policy_(policy) {}
  // The decision for the comparison of check `step`.
  ReplicaDecision decide(const ReplicaComparison& c, uint64_t step) const;
  // Records that `c`'s odd ranks were repaired at `step`: a later mismatch of one of them escalates.
  void noteRepaired(const ReplicaComparison& c, uint64_t step);
  ReplicaAction policy() const { return policy_; }

 private:
  ReplicaAction policy_;
  std::map<int, uint64_t> repairedAt_;  // rank -> step of its last repair
};

}  // namespace ringguard
