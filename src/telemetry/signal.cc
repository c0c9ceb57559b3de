#include "ringguard/telemetry/signal.h"

#include <utility>

#include "core/logging.h"

namespace ringguard {

Signal Signal::present(std::string name, double value, std::string unit, std::string source) {
  Signal s;
  s.name = std::move(name);
  s.value = value;
  s.unit = std::move(unit);
  s.source = std::move(source);
  return s;
}

Signal Signal::absent(std::string name, std::string unit, std::string source, std::string why) {
  Signal s;
  s.name = std::move(name);
  s.unit = std::move(unit);
  s.source = std::move(source);
  s.missing = true;
  s.why = std::move(why);
  return s;
}

const Signal* Sample::find(const std::string& name) const {
  for (const Signal& s : signals) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void Sample::set(Signal s) {
  for (Signal& existing : signals) {
    if (existing.name == s.name) {
      existing = std::move(s);
      return;
    }
  }
  signals.push_back(std::move(s));
}

std::string Sample::toString() const {
  std::string out;
  for (const Signal& s : signals) {
    if (!out.empty()) out += ", ";
    if (s.missing) {
      out += fmt::format("{}=missing({})", s.name, s.why);
    } else {
      out += fmt::format("{}={:.6g}{}{}", s.name, s.value, s.unit.empty() ? "" : " ", s.unit);
    }
  }
  return out;
}

}  // namespace ringguard
