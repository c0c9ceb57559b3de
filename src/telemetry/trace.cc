#include "ringguard/telemetry/trace.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/excerpt.h"
#include "core/json_input.h"
#include "core/logging.h"
#include "core/regular_file.h"

namespace ringguard {

namespace {
Status bad(int lineNo, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, fmt::format("trace line {}: {}", lineNo, what));
}

// A record is one line of about a hundred signals; a trace is one record per step.
constexpr JsonLimits kTraceLineLimits{size_t{1} << 20, 8};
constexpr size_t kMaxTraceBytes = size_t{1} << 30;
}  // namespace

Status parseTraceLine(const std::string& line, int lineNo, TraceRecord* out) {
  nlohmann::json j;
  RINGGUARD_RETURN_IF_ERROR(parseJsonInput(line, fmt::format("trace line {}", lineNo), kTraceLineLimits, &j));
  if (!j.is_object()) return bad(lineNo, "expected an object");
  *out = TraceRecord{};
  auto t = j.find("t_ms");
  if (t == j.end() || !t->is_number()) return bad(lineNo, "key 't_ms': missing or not a number");
  out->sample.timeNs = static_cast<int64_t>(std::llround(t->get<double>() * 1e6));
  auto step = j.find("step");
  if (step != j.end()) {
    if (!step->is_number_integer() || step->get<long long>() < 0) {
      return bad(lineNo, "key 'step': expected a non-negative integer, got " + excerpt(step->dump()));
    }
    out->step = step->get<long long>();
  }
  auto signals = j.find("signals");
  if (signals == j.end() || !signals->is_object())
    return bad(lineNo, "key 'signals': missing or not an object");
  const nlohmann::json* missing = nullptr;
  auto m = j.find("missing");
  if (m != j.end()) {
    if (!m->is_object()) return bad(lineNo, "key 'missing': expected an object of reasons");
    missing = &*m;
  }
  for (auto it = signals->begin(); it != signals->end(); ++it) {
    if (it->is_null()) {
      std::string why = "missing in the trace";
      if (missing != nullptr && missing->contains(it.key()) && (*missing)[it.key()].is_string()) {
        why = (*missing)[it.key()].get<std::string>();
      }
      out->sample.signals.push_back(Signal::absent(it.key(), "", "trace", why));
    } else if (it->is_number()) {
      out->sample.signals.push_back(Signal::present(it.key(), it->get<double>(), "", "trace"));
    } else {
      return bad(lineNo, fmt::format("key 'signals.{}': expected a number or null, got {}", excerpt(it.key()),
                                     excerpt(it->dump())));
    }
  }
  return Status::ok();
}

Status readTrace(const std::string& path, std::vector<TraceRecord>* out) {
  std::string text;
  RINGGUARD_RETURN_IF_ERROR(readRegularFile(path, "trace file", kMaxTraceBytes, &text));
  std::istringstream in(text);
  out->clear();
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    TraceRecord r;
    Status st = parseTraceLine(line, lineNo, &r);
    if (!st.isOk()) return Status(st.code(), path + ": " + st.message());
    out->push_back(std::move(r));
  }
  return Status::ok();
}

std::string traceLine(const Sample& s, long long step) {
  nlohmann::json j;
  j["t_ms"] = static_cast<double>(s.timeNs) / 1e6;
  if (step >= 0) j["step"] = step;
  nlohmann::json signals = nlohmann::json::object();
  nlohmann::json missing = nlohmann::json::object();
  for (const Signal& sig : s.signals) {
    if (sig.missing) {
      signals[sig.name] = nullptr;
      missing[sig.name] = sig.why;
    } else {
      signals[sig.name] = sig.value;
    }
  }
  j["signals"] = std::move(signals);
  if (!missing.empty()) j["missing"] = std::move(missing);
  return j.dump();
}

}  // namespace ringguard
