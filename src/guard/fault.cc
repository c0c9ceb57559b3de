#include "ringguard/guard/fault.h"

#include <functional>
#include <sstream>
#include <string>

namespace ringguard {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: decisions depend on the inputs only, never on history
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const char* faultValueName(FaultValue v) {
  switch (v) {
    case FaultValue::kNaN:
      return "nan";
    case FaultValue::kPosInf:
      return "+inf";
    case FaultValue::kNegInf:
      return "-inf";
    case FaultValue::kLargeFinite:
      return "large";
  }
  return "?";
}

bool parseFaultValue(const std::string& s, FaultValue* out) {
  if (s == "nan") {
    *out = FaultValue::kNaN;
  } else if (s == "+inf" || s == "inf") {
    *out = FaultValue::kPosInf;
  } else if (s == "-inf") {
    *out = FaultValue::kNegInf;
  } else if (s == "large") {
    *out = FaultValue::kLargeFinite;
  } else {
    return false;
  }
  return true;
}

void GuardFaultInjector::setSeed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
}

Status GuardFaultInjector::addRule(const GuardFaultRule& rule) {
  auto bad = [&](const std::string& what) {
    return Status(StatusCode::kInvalidArgument, "guard fault rule for op '" + rule.op + "': " + what);
  };
  if (rule.attempts < 1) return bad("attempts must be at least 1, got " + std::to_string(rule.attempts));
  if (!(rule.probability >= 0.0 && rule.probability <= 1.0)) {
    std::ostringstream os;
    os << "probability must be in [0, 1], got " << rule.probability;
    return bad(os.str());
  }
  if (rule.call < -1)
    return bad("call must be -1 (every call) or a call index, got " + std::to_string(rule.call));
  if (rule.output < -1)
    return bad("output must be -1 (every target) or a target index, got " + std::to_string(rule.output));
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(rule);
  return Status::ok();
}

void GuardFaultInjector::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.clear();
}

bool GuardFaultInjector::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !rules_.empty();
}

std::vector<GuardFaultHit> GuardFaultInjector::hits(const std::string& op, uint64_t call, int attempt,
                                                    size_t targets) const {
  std::vector<GuardFaultHit> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t r = 0; r < rules_.size(); ++r) {
    const GuardFaultRule& rule = rules_[r];
    if (!rule.op.empty() && rule.op != op) continue;
    if (rule.call >= 0 && static_cast<uint64_t>(rule.call) != call) continue;
    if (attempt >= rule.attempts) continue;
    for (size_t o = 0; o < targets; ++o) {
      if (rule.output >= 0 && static_cast<size_t>(rule.output) != o) continue;
      if (rule.probability < 1.0) {
        // The draw ignores the attempt, so a hit call stays hit for its first `attempts` attempts.
        const uint64_t h = mix(mix(mix(mix(seed_ ^ std::hash<std::string>{}(op)) ^ call) ^ o) ^ r);
        const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
        if (u >= rule.probability) continue;
      }
      out.push_back(GuardFaultHit{static_cast<int>(o), rule.element, rule.value});
    }
  }
  return out;
}

}  // namespace ringguard
