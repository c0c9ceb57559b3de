#include "observability/chrome_trace.h"

namespace ringguard {
namespace observability {

namespace {

const char* category(trace::Kind k) {
  switch (k) {
    case trace::Kind::kCollective:
      return "collective";
    case trace::Kind::kEnqueue:
      return "enqueue";
    case trace::Kind::kSlice:
      return "slice";
    case trace::Kind::kDetect:
      return "detect";
    case trace::Kind::kRetransmit:
      return "retransmit";
    case trace::Kind::kRepair:
      return "repair";
    case trace::Kind::kControl:
    case trace::Kind::kPeerControl:
      return "control";
    case trace::Kind::kGuard:
      return "guard";
    case trace::Kind::kDowngrade:
      return "downgrade";
    case trace::Kind::kCounter:
      return "telemetry";
    case trace::Kind::kReplica:
      return "replica";
  }
  return "other";
}

// The names of a, b, c, d and value per kind (nullptr: not used), as documented in trace_events.h.
struct ArgNames {
  const char* a;
  const char* b;
  const char* c;
  const char* d;
  const char* value;
};

ArgNames argNames(trace::Kind k) {
  switch (k) {
    case trace::Kind::kCollective:
      return {"direct", nullptr, nullptr, nullptr, "bytes"};
    case trace::Kind::kEnqueue:
      return {"direct", nullptr, nullptr, nullptr, "bytes"};
    case trace::Kind::kSlice:
      return {"step", "slice", "from", "attempt", "bytes"};
    case trace::Kind::kDetect:
      return {"sender", "receiver", "step", "slice", nullptr};
    case trace::Kind::kRetransmit:
      return {"to", "step", "slice", "attempt", nullptr};
    case trace::Kind::kRepair:
      return {"attempt", "slices", nullptr, nullptr, nullptr};
    case trace::Kind::kControl:
      return {"rounds", "round", nullptr, nullptr, nullptr};
    case trace::Kind::kPeerControl:
      return {"peer", "received", nullptr, nullptr, nullptr};
    case trace::Kind::kGuard:
      return {"attempt", nullptr, nullptr, nullptr, nullptr};
    case trace::Kind::kReplica:
      return {"step", "rank", nullptr, nullptr, "bytes"};
    case trace::Kind::kDowngrade:
    case trace::Kind::kCounter:
      break;
  }
  return {nullptr, nullptr, nullptr, nullptr, nullptr};
}

double micros(uint64_t ns) { return double(ns) / 1000.0; }

// Which kinds carry a collective sequence number.
bool hasSeq(trace::Kind k) {
  return k != trace::Kind::kEnqueue && k != trace::Kind::kGuard && k != trace::Kind::kDowngrade &&
         k != trace::Kind::kCounter && k != trace::Kind::kReplica;
}

}  // namespace

nlohmann::json chromeTrace(const std::vector<trace::Event>& events, const std::vector<std::string>& tracks,
                           int rank, uint64_t dropped, size_t capacity) {
  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"name", "process_name"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"tid", 0},
                 {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (size_t i = 0; i < tracks.size(); ++i) {
    out.push_back({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", rank},
                   {"tid", i + 1},
                   {"args", {{"name", tracks[i]}}}});
  }
  for (const trace::Event& e : events) {
    nlohmann::json j = {{"name", e.name}, {"cat", category(e.kind)}, {"ts", micros(e.tsNs)}, {"pid", rank}};
    nlohmann::json args = nlohmann::json::object();
    if (e.kind == trace::Kind::kCounter) {
      j["ph"] = "C";
      args[e.name] = e.real;  // one series per counter name
    } else {
      j["tid"] = e.track;
      if (e.span) {
        j["ph"] = "X";
        j["dur"] = micros(e.durNs);
      } else {
        j["ph"] = "i";
        j["s"] = "t";  // an instant on its thread's track
      }
      if (hasSeq(e.kind)) args["seq"] = e.seq;
      const ArgNames n = argNames(e.kind);
      if (n.a) args[n.a] = e.a;
      if (n.b) args[n.b] = e.b;
      if (n.c) args[n.c] = e.c;
      if (n.d) args[n.d] = e.d;
      if (n.value) args[n.value] = e.value;
      if (e.detail != nullptr) args["detail"] = e.detail;
    }
    j["args"] = std::move(args);
    out.push_back(std::move(j));
  }
  return {{"traceEvents", std::move(out)},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"producer", "ringguard"},
            {"rank", rank},
            {"events", events.size()},
            {"dropped", dropped},
            {"capacity", capacity},
            {"clock", "steady_clock (CLOCK_MONOTONIC): ranks on one host share it"}}}};
}

}  // namespace observability
}  // namespace ringguard
