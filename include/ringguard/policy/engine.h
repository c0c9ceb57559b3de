#pragma once
// The downgrade engine: at every step boundary it evaluates the rules on the latest telemetry and switches
// each operator family to the variant they select, with hysteresis (per-condition enter/exit thresholds)
// and a minimum dwell, among the variants the registry has enabled. docs/DOWNGRADE.md has the semantics.
//
//   PolicyEngine engine(rules, &registry);
//   engine.setAgreement(agreement);   // collective families: MAX across ranks (e.g. an allreduce of the
//                                     // float64 vector over a ringguard Communicator, kMax)
//   for each step: RINGGUARD_RETURN_IF_ERROR(engine.onStep(sampler.latest())); ...
//   engine.current("all_gather")
//
// onStep is called by one thread, at the same step boundaries on every rank; current(), decisions() and
// counters() may be called from any thread.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/policy/registry.h"
#include "ringguard/policy/rules.h"
#include "ringguard/telemetry/signal.h"

namespace ringguard {

// Reduces `values` in place with MAX over every rank (one small allreduce of float64). Called once per
// onStep on every rank, so the vector's length is the same everywhere when the rules are.
using PolicyAgreement = std::function<Status(std::vector<double>* values)>;

struct PolicyDecision {
  uint64_t index = 0;  // 0, 1, 2, ... over the engine's life
  uint64_t step = 0;   // the onStep call (0-based) at which it took effect
  int64_t timeNs = 0;  // the sample's time
  std::string family;
  std::string from;  // "" for the initial choice
  std::string to;
  std::string reason;   // which conditions held or stopped holding, or "initial", "forced", "disabled"
  bool agreed = false;  // decided from signals reduced across ranks (a collective family)
  std::vector<Signal> signals;  // the signals the deciding conditions read, as the decision saw them
  std::string toString() const;
};

struct PolicyCounters {
  uint64_t steps = 0;
  uint64_t decisions = 0;     // switches, the initial choices included
  uint64_t dwellHolds = 0;    // steps at which a switch was wanted but held back by a minimum dwell
  uint64_t missingReads = 0;  // condition evaluations on a missing signal (the condition is then off)
  uint64_t agreements = 0;    // agreement calls made
  std::map<std::string, uint64_t> switches;  // per family, the initial choice excluded
};

class PolicyEngine {
 public:
  // `registry` may be null (every variant of the rules counts as enabled) and must outlive the engine.
  explicit PolicyEngine(PolicyRules rules, const VariantRegistry* registry = nullptr);

  void setAgreement(PolicyAgreement agreement);
  // Pins `family` to `variant` (it still has to be enabled); "" unpins. kInvalidArgument naming the family
  // or variant when the rules have no such one.
  Status force(const std::string& family, const std::string& variant);
  // RINGGUARD_POLICY (on/off) and RINGGUARD_POLICY_FORCE.
  Status configureFromEnv();
  // off: every family takes its first enabled variant, conditions ignored.
  void setRulesEnabled(bool on);

  // One step boundary. `local` is this rank's latest sample; its timeNs is the clock for dwell times.
  // kInvalidArgument when ranks disagree on the rules or the step count (from the agreement), or an
  // agreement error as returned by the callback; the previous choices stay in effect then.
  Status onStep(const Sample& local);

  // The family's current variant ("" before the first onStep or when it has no enabled variant).
  std::string current(const std::string& family) const;
  std::vector<PolicyDecision> decisions() const;  // the last kKeptDecisions, oldest first
  PolicyCounters counters() const;
  const PolicyRules& rules() const { return rules_; }
  uint64_t steps() const;

  static constexpr size_t kKeptDecisions = 4096;

 private:
  struct FamilyState {
    int current = -1;
    uint64_t sinceStep = 0;
    int64_t sinceNs = 0;
    std::vector<std::vector<bool>> latched;  // [variant][condition]
    bool warnedNone = false;
  };
  struct Inputs;  // the values a family's conditions read (local, or agreed)

  Status agree(const Sample& local, std::vector<double>* agreed);
  void evaluate(const PolicyFamily& f, FamilyState* st, const Inputs& in, uint64_t step, int64_t nowNs,
                double elapsedMs);
  bool variantEnabled(const PolicyFamily& f, int v, const Inputs& in) const;

  const PolicyRules rules_;
  const VariantRegistry* registry_;
  PolicyAgreement agreement_;
  bool rulesEnabled_ = true;
  std::map<std::string, std::string> forced_;
  std::vector<FamilyState> state_;  // parallel to rules_.families
  uint64_t step_ = 0;

  mutable std::mutex mu_;                       // guards what other threads read:
  std::map<std::string, std::string> current_;  // family -> variant
  std::vector<PolicyDecision> decisions_;
  PolicyCounters counters_;
};

}  // namespace ringguard
