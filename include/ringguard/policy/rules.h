#pragma once
// Downgrade rules (docs/DOWNGRADE.md has the file format): per operator family an ordered list of
// variants, each with conditions on telemetry signals (enter and exit thresholds: hysteresis), a priority
// and a minimum dwell. Parsed from JSON and validated on load; every error names the key (as a JSON
// pointer), the value and the problem.
#include <cstdint>
#include <string>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

// local: each rank decides from its own signals (ops without cross-rank effects, e.g. attention).
// collective: every rank decides from the signals reduced (MAX) across ranks at the same step boundary,
// so a variant that changes a collective switches on every rank at the same point.
enum class PolicyScope : uint8_t { kLocal = 0, kCollective };
const char* policyScopeName(PolicyScope s);  // "local", "collective"

struct PolicyCondition {
  std::string signal;  // e.g. "pcie.util"
  // above: on once value >= enter, off again once value < exit (exit <= enter).
  // below: on once value <= enter, off again once value > exit (exit >= enter).
  bool above = true;
  double enter = 0.0;
  double exit = 0.0;
  std::string describe() const;  // "pcie.util above 0.85 (exit 0.6)"
};

struct PolicyVariant {
  std::string name;
  int priority = 0;  // among variants whose conditions hold, the highest wins; ties: the earlier one
  std::vector<PolicyCondition> when;  // empty: always eligible (a baseline variant)
  bool matchAll = true;               // "match": "all" (every condition on) or "any"
  // Once active, the variant is kept at least this long (both must have passed) unless it gets disabled.
  int64_t minDwellMs = 0;
  int64_t minDwellSteps = 0;
  std::string description;
};

struct PolicyFamily {
  std::string name;
  PolicyScope scope = PolicyScope::kLocal;
  std::vector<PolicyVariant> variants;  // in order of preference; at least one
  std::string description;
  const PolicyVariant* variant(const std::string& name) const;
  int indexOf(const std::string& name) const;  // -1 when absent
};

struct PolicyRules {
  int version = 1;
  std::vector<PolicyFamily> families;  // sorted by name
  std::string origin;                  // file path, or "built-in default"
  uint32_t digest = 0;                 // CRC-32 of the canonical (validated, edited) JSON: equal on ranks
                                       // that loaded the same rules
  const PolicyFamily* family(const std::string& name) const;
  // Every signal a family's conditions name, sorted and unique.
  std::vector<std::string> signalsOf(const PolicyFamily& f) const;
};

// Parses and validates `json`. `edits`: RINGGUARD_POLICY_SET syntax (";"-separated "/json/pointer=value"
// with a JSON value), applied before validation. `origin` names the text in errors.
Status parseRules(const std::string& json, const std::string& origin, const std::string& edits,
                  PolicyRules* out);
Status loadRulesFile(const std::string& path, const std::string& edits, PolicyRules* out);
// The rules shipped with the library (share/ringguard/rules/default.json, compiled in).
const std::string& defaultRulesJson();
// RINGGUARD_POLICY_RULES (a path; empty: the default rules) with RINGGUARD_POLICY_SET's edits.
Status loadRulesFromEnv(PolicyRules* out);

}  // namespace ringguard
