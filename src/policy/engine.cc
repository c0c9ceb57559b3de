#include "ringguard/policy/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "core/env.h"
#include "core/excerpt.h"
#include "core/logging.h"
#include "core/trace_events.h"

namespace ringguard {

namespace {
constexpr double kMissing = -std::numeric_limits<double>::infinity();  // MAX-neutral
}  // namespace

namespace {
uint32_t policyTrack() {
  static const uint32_t track = trace::newTrack("policy");
  return track;
}
}  // namespace

std::string PolicyDecision::toString() const {
  std::string sig;
  for (const Signal& s : signals) {
    if (!sig.empty()) sig += ", ";
    sig +=
        s.missing ? fmt::format("{}=missing({})", s.name, s.why) : fmt::format("{}={:.6g}", s.name, s.value);
  }
  return fmt::format("#{} step {} {}: {} -> {} ({}{}){}{}", index, step, family,
                     from.empty() ? "(none)" : from, to, reason, agreed ? ", agreed across ranks" : "",
                     sig.empty() ? "" : "; signals: ", sig);
}

// What one family's conditions read: a value per signal name (kMissing when missing) and, for collective
// families, which variants some rank has disabled.
struct PolicyEngine::Inputs {
  std::map<std::string, double> values;
  std::map<std::string, std::string> why;  // of missing local values
  std::vector<bool> disabledSomewhere;     // per variant (collective families); empty for local ones
  bool agreed = false;
  double value(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? kMissing : it->second;
  }
};

PolicyEngine::PolicyEngine(PolicyRules rules, const VariantRegistry* registry)
    : rules_(std::move(rules)), registry_(registry) {
  state_.resize(rules_.families.size());
  for (size_t i = 0; i < rules_.families.size(); ++i) {
    for (const PolicyVariant& v : rules_.families[i].variants)
      state_[i].latched.emplace_back(v.when.size(), false);
  }
}

void PolicyEngine::setAgreement(PolicyAgreement agreement) { agreement_ = std::move(agreement); }
void PolicyEngine::setRulesEnabled(bool on) { rulesEnabled_ = on; }

Status PolicyEngine::force(const std::string& family, const std::string& variant) {
  const PolicyFamily* f = rules_.family(family);
  if (f == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("policy force: no family '{}' in rules {}", excerpt(family), rules_.origin));
  }
  if (variant.empty()) {
    forced_.erase(family);
    return Status::ok();
  }
  if (f->indexOf(variant) < 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("policy force: family '{}' has no variant '{}' in rules {}", excerpt(family),
                              excerpt(variant), rules_.origin));
  }
  forced_[family] = variant;
  return Status::ok();
}

Status PolicyEngine::configureFromEnv() {
  if (envLookup("RINGGUARD_POLICY") != nullptr) {
    int choice = 0;  // 0: on (or 1), 1: off (or 0), as declared (core/settings.cc)
    RINGGUARD_RETURN_IF_ERROR(parseChoiceSetting("RINGGUARD_POLICY", envLookup, &choice));
    rulesEnabled_ = choice == 0;
  }
  if (const char* f = envLookup("RINGGUARD_POLICY_FORCE")) {
    std::stringstream ss(f);
    std::string item;
    std::map<std::string, std::string> seen;  // a family named twice: which one was meant is a guess
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        return Status(StatusCode::kInvalidArgument,
                      "RINGGUARD_POLICY_FORCE entry '" + excerpt(item) + "': expected family=variant");
      }
      const std::string family = item.substr(0, eq);
      const auto [prev, first] = seen.emplace(family, item.substr(eq + 1));
      if (!first) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("RINGGUARD_POLICY_FORCE: family '{}' is forced twice ('{}', then '{}'): "
                                  "name each family once",
                                  excerpt(family), excerpt(prev->second), excerpt(item.substr(eq + 1))));
      }
      Status st = force(family, item.substr(eq + 1));
      if (!st.isOk()) return Status(st.code(), "RINGGUARD_POLICY_FORCE: " + st.message());
    }
  }
  return Status::ok();
}

bool PolicyEngine::variantEnabled(const PolicyFamily& f, int v, const Inputs& in) const {
  if (!in.disabledSomewhere.empty()) return !in.disabledSomewhere[static_cast<size_t>(v)];
  return registry_ == nullptr || registry_->enabled(f.name, f.variants[static_cast<size_t>(v)].name);
}

// The agreement vector: [digest, -digest, step, -step, then per collective family (in rules order): elapsed
// ms since its last switch, one "disabled here" flag per variant, one value per signal its conditions read].
// MAX of (x, -x) pairs tells whether every rank had the same x: max(x) == -max(-x).
Status PolicyEngine::agree(const Sample& local, std::vector<double>* v) {
  v->clear();
  v->push_back(rules_.digest);
  v->push_back(-static_cast<double>(rules_.digest));
  v->push_back(static_cast<double>(step_));
  v->push_back(-static_cast<double>(step_));
  for (size_t i = 0; i < rules_.families.size(); ++i) {
    const PolicyFamily& f = rules_.families[i];
    if (f.scope != PolicyScope::kCollective) continue;
    const FamilyState& st = state_[i];
    v->push_back(st.current < 0 ? 0.0 : static_cast<double>(local.timeNs - st.sinceNs) / 1e6);
    for (size_t k = 0; k < f.variants.size(); ++k) {
      const bool on = registry_ == nullptr || registry_->enabled(f.name, f.variants[k].name);
      v->push_back(on ? 0.0 : 1.0);
    }
    for (const std::string& name : rules_.signalsOf(f)) {
      const Signal* s = local.find(name);
      v->push_back(s == nullptr || s->missing ? kMissing : s->value);
    }
  }
  if (!agreement_) return Status::ok();
  const size_t n = v->size();
  RINGGUARD_RETURN_IF_ERROR(agreement_(v));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.agreements;
  }
  if (v->size() != n) {
    return Status(
        StatusCode::kInternal,
        fmt::format("policy agreement returned {} values for {} (the callback must reduce in place)",
                    v->size(), n));
  }
  if ((*v)[0] != -(*v)[1]) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("policy: ranks loaded different rules (this rank's digest {:08x} from {}; digests over "
                    "the ranks span {:08x}..{:08x}): every rank must use the same rules and "
                    "RINGGUARD_POLICY_SET",
                    rules_.digest, rules_.origin, static_cast<uint32_t>(-(*v)[1]),
                    static_cast<uint32_t>((*v)[0])));
  }
  if ((*v)[2] != -(*v)[3]) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("policy: ranks are at different step boundaries (this rank: step {}, ranks span {}..{}): "
                    "onStep must be called at the same points on every rank",
                    step_, -(*v)[3], (*v)[2]));
  }
  return Status::ok();
}

void PolicyEngine::evaluate(const PolicyFamily& f, FamilyState* st, const Inputs& in, uint64_t step,
                            int64_t nowNs, double elapsedMs) {
  const int n = static_cast<int>(f.variants.size());
  uint64_t missingReads = 0;
  // 1. Latches: every condition's hysteresis advances every step, whatever is chosen.
  std::vector<bool> triggered(static_cast<size_t>(n), false);
  for (int v = 0; v < n; ++v) {
    const PolicyVariant& pv = f.variants[static_cast<size_t>(v)];
    if (pv.when.empty()) {
      triggered[static_cast<size_t>(v)] = true;
      continue;
    }
    bool all = true, any = false;
    for (size_t c = 0; c < pv.when.size(); ++c) {
      const PolicyCondition& pc = pv.when[c];
      const double x = in.value(pc.signal);
      std::vector<bool>::reference latch = st->latched[static_cast<size_t>(v)][c];
      if (x == kMissing) {
        ++missingReads;
        latch = false;  // never entered, nor held, on data that is not there
      } else if (pc.above) {
        latch = latch ? x >= pc.exit : x >= pc.enter;
      } else {
        latch = latch ? x <= pc.exit : x <= pc.enter;
      }
      all = all && latch;
      any = any || latch;
    }
    triggered[static_cast<size_t>(v)] = pv.matchAll ? all : any;
  }
  // 2. The target: forced, or the highest-priority triggered enabled variant (ties: the earlier one); with
  // the rules off, the first enabled one.
  std::vector<bool> enabled(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) enabled[static_cast<size_t>(v)] = variantEnabled(f, v, in);
  int target = -1;
  std::string reason;
  auto forcedIt = forced_.find(f.name);
  if (forcedIt != forced_.end()) {
    const int fv = f.indexOf(forcedIt->second);
    if (enabled[static_cast<size_t>(fv)]) {
      target = fv;
      reason = "forced (RINGGUARD_POLICY_FORCE)";
    }
  }
  if (target < 0 && !rulesEnabled_) {
    for (int v = 0; v < n && target < 0; ++v) {
      if (enabled[static_cast<size_t>(v)]) target = v;
    }
    reason = "rules off: first enabled variant";
  }
  if (target < 0) {
    for (int v = 0; v < n; ++v) {
      if (!triggered[static_cast<size_t>(v)] || !enabled[static_cast<size_t>(v)]) continue;
      if (target < 0 ||
          f.variants[static_cast<size_t>(v)].priority > f.variants[static_cast<size_t>(target)].priority) {
        target = v;
      }
    }
  }
  if (target < 0) {
    // Nothing eligible is enabled (e.g. the running baseline lost its kernel): as Horovod's operation
    // manager, the first enabled variant, conditions or not.
    for (int v = 0; v < n && target < 0; ++v) {
      if (enabled[static_cast<size_t>(v)]) target = v;
    }
    if (target >= 0) reason = "no enabled variant's conditions hold: first enabled variant";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.missingReads += missingReads;
  }
  if (target < 0) {
    if (!st->warnedNone) {
      logWarn(Subsys::kPolicy, "policy: family '{}' has no enabled variant at step {}; keeping '{}'", f.name,
              step, st->current < 0 ? "" : f.variants[static_cast<size_t>(st->current)].name);
      st->warnedNone = true;
    }
    return;
  }
  st->warnedNone = false;
  if (target == st->current) return;
  // 3. Dwell: the current variant is kept for its minimum dwell, unless it can no longer run.
  if (st->current >= 0 && enabled[static_cast<size_t>(st->current)] && reason.empty()) {
    const PolicyVariant& cur = f.variants[static_cast<size_t>(st->current)];
    const uint64_t steps = step - st->sinceStep;
    if (steps < static_cast<uint64_t>(cur.minDwellSteps) || elapsedMs < static_cast<double>(cur.minDwellMs)) {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.dwellHolds;
      return;
    }
  }
  // 4. Switch, with the reason and the signals that caused it.
  const PolicyVariant& to = f.variants[static_cast<size_t>(target)];
  std::vector<std::string> names;
  auto note = [&](const PolicyVariant& pv) {
    for (const PolicyCondition& c : pv.when) {
      if (std::find(names.begin(), names.end(), c.signal) == names.end()) names.push_back(c.signal);
    }
  };
  if (reason.empty()) {
    if (st->current < 0) {
      reason = "initial";
    } else if (!enabled[static_cast<size_t>(st->current)]) {
      reason = fmt::format("'{}' is no longer enabled", f.variants[static_cast<size_t>(st->current)].name);
    }
    std::vector<std::string> parts;
    if (!to.when.empty()) {
      std::string held;
      for (size_t c = 0; c < to.when.size(); ++c) {
        if (st->latched[static_cast<size_t>(target)][c])
          held += std::string(held.empty() ? "" : " and ") + to.when[c].describe();
      }
      parts.push_back("entered: " + held);
    }
    if (st->current >= 0) {
      const PolicyVariant& from = f.variants[static_cast<size_t>(st->current)];
      if (!from.when.empty() && !triggered[static_cast<size_t>(st->current)]) {
        std::string gone;
        for (const PolicyCondition& c : from.when)
          gone += std::string(gone.empty() ? "" : ", ") + c.describe();
        parts.push_back("left: " + gone + " no longer holds");
      }
      note(from);
    }
    for (const std::string& p : parts) reason += std::string(reason.empty() ? "" : "; ") + p;
    if (reason.empty()) reason = "higher priority or preference";
  }
  note(to);
  PolicyDecision d;
  d.step = step;
  d.timeNs = nowNs;
  d.family = f.name;
  d.from = st->current < 0 ? "" : f.variants[static_cast<size_t>(st->current)].name;
  d.to = to.name;
  d.reason = reason;
  d.agreed = in.agreed;
  for (const std::string& name : names) {
    const double x = in.value(name);
    if (x == kMissing) {
      auto w = in.why.find(name);
      d.signals.push_back(Signal::absent(name, "", in.agreed ? "agreed" : "local",
                                         w != in.why.end() ? w->second : "missing on every rank"));
    } else {
      d.signals.push_back(Signal::present(name, x, "", in.agreed ? "agreed (max over ranks)" : "local"));
    }
  }
  const bool initial = st->current < 0;
  st->current = target;
  st->sinceStep = step;
  st->sinceNs = nowNs;
  std::lock_guard<std::mutex> lock(mu_);
  d.index = counters_.decisions++;
  if (!initial) ++counters_.switches[f.name];
  current_[f.name] = to.name;
  logInfo(Subsys::kPolicy, "policy: {}", d.toString());
  trace::tally(trace::Tally::kDowngrade);
  if (trace::on()) {
    trace::instant(trace::Kind::kDowngrade, "downgrade", policyTrack(), 0, 0, 0, 0, 0,
                   trace::intern(d.toString()));
  }
  decisions_.push_back(std::move(d));
  if (decisions_.size() > kKeptDecisions) decisions_.erase(decisions_.begin());
}

Status PolicyEngine::onStep(const Sample& local) {
  std::vector<double> agreed;
  RINGGUARD_RETURN_IF_ERROR(agree(local, &agreed));
  const uint64_t step = step_;
  size_t pos = 4;  // after the digest and step pairs
  for (size_t i = 0; i < rules_.families.size(); ++i) {
    const PolicyFamily& f = rules_.families[i];
    FamilyState& st = state_[i];
    Inputs in;
    double elapsedMs = st.current < 0 ? 0.0 : static_cast<double>(local.timeNs - st.sinceNs) / 1e6;
    if (f.scope == PolicyScope::kCollective) {
      in.agreed = agreement_ != nullptr;
      elapsedMs = agreed[pos++];
      for (size_t k = 0; k < f.variants.size(); ++k) in.disabledSomewhere.push_back(agreed[pos++] != 0.0);
      for (const std::string& name : rules_.signalsOf(f)) in.values[name] = agreed[pos++];
    } else {
      for (const std::string& name : rules_.signalsOf(f)) {
        const Signal* s = local.find(name);
        in.values[name] = s == nullptr || s->missing ? kMissing : s->value;
      }
    }
    for (const std::string& name : rules_.signalsOf(f)) {
      const Signal* s = local.find(name);
      if (s == nullptr) {
        in.why[name] = "no source reports it";
      } else if (s->missing) {
        in.why[name] = s->why;
      }
    }
    evaluate(f, &st, in, step, local.timeNs, elapsedMs);
  }
  ++step_;
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.steps;
  return Status::ok();
}

std::string PolicyEngine::current(const std::string& family) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = current_.find(family);
  return it == current_.end() ? "" : it->second;
}

std::vector<PolicyDecision> PolicyEngine::decisions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decisions_;
}

PolicyCounters PolicyEngine::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

uint64_t PolicyEngine::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_.steps;
}

}  // namespace ringguard
