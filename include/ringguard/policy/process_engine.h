#pragma once
// The process's downgrade engine: the one whose current selection the c10d backend reads when it issues a
// collective of a collective family (all_gather: ring or staged_chunked, docs/DOWNGRADE.md). The engine
// takes its decisions at step boundaries, the same on every rank, so reading its current variant when a
// collective is issued gives every rank the same choice for the same collective.
// ringguard.policy.load() makes its engine the process's; a C++ program calls setProcessPolicyEngine.
#include <memory>
#include <string>

#include "ringguard/policy/engine.h"

namespace ringguard {

// Held weakly: an engine that is destroyed stops being the process's. nullptr (or an empty pointer)
// clears it. Thread-safe.
void setProcessPolicyEngine(std::weak_ptr<const PolicyEngine> engine);
// The process engine's current variant of `family`; "" when there is no process engine, before its first
// step, or when the family has no enabled variant. Thread-safe.
std::string processPolicyVariant(const std::string& family);

}  // namespace ringguard
