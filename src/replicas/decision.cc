// The policy's decision on a comparison, with escalation after a repeat offence.
#include "ringguard/replicas/decision.h"

namespace ringguard {

const char* replicaActionName(ReplicaAction a) {
  switch (a) {
    case ReplicaAction::kNone:
      return "none";
    case ReplicaAction::kWarn:
      return "warn";
    case ReplicaAction::kRepair:
      return "repair";
    case ReplicaAction::kRaise:
      return "raise";
  }
  return "?";
}

bool parseReplicaPolicy(const std::string& s, ReplicaAction* out) {
  for (ReplicaAction a : {ReplicaAction::kRaise, ReplicaAction::kRepair, ReplicaAction::kWarn}) {
    if (s == replicaActionName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

ReplicaDecision ReplicaDecider::decide(const ReplicaComparison& c, uint64_t step) const {
  ReplicaDecision d;
  if (!c.mismatch) return d;
  if (!c.structural.empty()) {
    // Nothing was compared, so nothing can be repaired or let through.
    d.action = ReplicaAction::kRaise;
    d.escalated = policy_ != ReplicaAction::kRaise;
    d.reason = "the replicas cannot be compared";
    return d;
  }
  d.action = policy_;
  if (policy_ != ReplicaAction::kRepair) return d;
  if (!c.majority || c.source < 0) {
    d.action = ReplicaAction::kRaise;
    d.escalated = true;
    d.reason = "no majority to repair from (" + std::to_string(c.replicas) +
               " replicas; a repair needs at least 3 and a strict majority)";
    return d;
  }
  for (int r : c.oddRanks) {
    auto it = repairedAt_.find(r);
    if (it != repairedAt_.end() && it->second < step) {
      d.action = ReplicaAction::kRaise;
      d.escalated = true;
      d.reason = "rank " + std::to_string(r) + " mismatches again after its repair at step " +
                 std::to_string(it->second) + ": a persistently faulty device";
      return d;
    }
  }
  return d;
}

void ReplicaDecider::noteRepaired(const ReplicaComparison& c, uint64_t step) {
  for (int r : c.oddRanks) repairedAt_[r] = step;
}

}  // namespace ringguard
