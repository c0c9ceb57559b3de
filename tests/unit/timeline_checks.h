#pragma once
// Checks of a faulty run's timeline (issue 18), shared by the loopback suite (every rank in one trace) and
// the mpirun suite (one trace file per rank): the Chrome trace format that Perfetto's JSON importer reads,
// a complete span per collective with the same numbers on every rank, the events against the counters,
// and a repair (a retransmission, then the slice received again) for every detection.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ringguard/core/counters.h"

namespace ringguard {
namespace testing {

// One communicator's events, by category.
struct TrackEvents {
  int rank = -1;
  std::vector<nlohmann::json> collectives, slices, detects, retransmits, repairs, controls, enqueues;
};

// Every event names its phase, process and time (complete events their duration too); nothing dropped.
inline void checkTraceFormat(const nlohmann::json& trace) {
  ASSERT_TRUE(trace.contains("traceEvents") && trace.at("traceEvents").is_array()) << "no traceEvents list";
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "X" || ph == "i" || ph == "C" || ph == "M") << e.dump();
    if (ph == "M") continue;
    ASSERT_TRUE(e.at("ts").is_number()) << e.dump();
    if (ph == "X") ASSERT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    if (ph != "C") ASSERT_TRUE(e.contains("tid")) << e.dump();
  }
  EXPECT_EQ(trace.at("otherData").at("dropped"), 0);
}

// The label of every thread track (thread_name metadata), by tid.
inline std::map<uint32_t, std::string> trackLabels(const nlohmann::json& trace) {
  std::map<uint32_t, std::string> out;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") out[e.at("tid")] = e.at("args").at("name");
  }
  return out;
}

inline TrackEvents eventsOfTrack(const nlohmann::json& trace, uint32_t tid, int rank) {
  TrackEvents t;
  t.rank = rank;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" || e.at("ph") == "C" || e.at("tid") != tid) continue;
    const std::string cat = e.at("cat");
    if (cat == "collective") t.collectives.push_back(e);
    if (cat == "slice") t.slices.push_back(e);
    if (cat == "detect") t.detects.push_back(e);
    if (cat == "retransmit") t.retransmits.push_back(e);
    if (cat == "repair") t.repairs.push_back(e);
    if (cat == "control") t.controls.push_back(e);
    if (cat == "enqueue") t.enqueues.push_back(e);
  }
  return t;
}

// Whether `inner` lies within the collective span of the same seq.
inline bool withinCollective(const nlohmann::json& inner, const std::vector<nlohmann::json>& collectives) {
  const double ts = inner.at("ts");
  const double end = ts + (inner.contains("dur") ? inner.at("dur").get<double>() : 0.0);
  for (const nlohmann::json& c : collectives) {
    if (c.at("args").at("seq") != inner.at("args").at("seq")) continue;
    const double cts = c.at("ts"), cend = cts + c.at("dur").get<double>();
    return ts >= cts - 1e-3 && end <= cend + 1e-3;
  }
  return false;
}

// `ranks[r]` is rank r's communicator track of a run of `kinds` (in issue order, no failure) and
// `counters[r]` its counters. Returns the number of detections.
inline uint64_t checkFaultyRun(const std::vector<TrackEvents>& ranks, const std::vector<Counters>& counters,
                               const std::vector<std::string>& kinds) {
  uint64_t detections = 0;
  for (const TrackEvents& t : ranks) {
    SCOPED_TRACE("rank " + std::to_string(t.rank));
    // Every collective has a start and an end (a complete span), in issue order, numbered 0, 1, 2, ...:
    // the same on every rank.
    EXPECT_EQ(t.collectives.size(), kinds.size());
    EXPECT_EQ(t.enqueues.size(), kinds.size());
    for (size_t i = 0; i < std::min(kinds.size(), t.collectives.size()); ++i) {
      EXPECT_EQ(t.collectives[i].at("name"), kinds[i]);
      EXPECT_EQ(t.collectives[i].at("args").at("seq"), i);
      EXPECT_FALSE(t.collectives[i].at("args").contains("detail")) << "a collective failed";
    }
    // The events agree with the counters, and every one lies inside its collective's span.
    const Counters& c = counters[size_t(t.rank)];
    EXPECT_EQ(t.slices.size(), c.slicesVerified);
    EXPECT_EQ(t.detects.size(), c.detected);
    EXPECT_EQ(t.retransmits.size(), c.retransmitted);
    EXPECT_EQ(t.repairs.size(), c.repairRounds);
    for (const auto* list : {&t.slices, &t.detects, &t.retransmits, &t.repairs, &t.controls}) {
      for (const nlohmann::json& e : *list) EXPECT_TRUE(withinCollective(e, t.collectives)) << e.dump();
    }
    // Every collective exchanges a fingerprint; a faulty one a verdict round per repair too.
    EXPECT_GE(t.controls.size(), kinds.size());
    for (const nlohmann::json& d : t.detects) {
      EXPECT_EQ(d.at("args").at("receiver"), t.rank);
      EXPECT_EQ(d.at("args").at("detail"), "payload CRC mismatch") << d.dump();
    }
    detections += t.detects.size();
  }
  // Every detection is repaired: a rank resends the slice from its retained bytes (at the detected step, or
  // at an earlier one when the repair replays the column from there), and the detecting rank receives it
  // again, verified, in a later attempt.
  for (const TrackEvents& t : ranks) {
    for (const nlohmann::json& d : t.detects) {
      const nlohmann::json& a = d.at("args");
      bool resent = false, received = false;
      for (const TrackEvents& other : ranks) {
        for (const nlohmann::json& r : other.retransmits) {
          const nlohmann::json& b = r.at("args");
          resent |= b.at("seq") == a.at("seq") && b.at("slice") == a.at("slice") &&
                    b.at("step").get<int>() <= a.at("step").get<int>();
        }
      }
      for (const nlohmann::json& r : t.slices) {
        const nlohmann::json& b = r.at("args");
        received |= b.at("seq") == a.at("seq") && b.at("step") == a.at("step") &&
                    b.at("slice") == a.at("slice") && b.at("from") == a.at("sender") &&
                    b.at("attempt").get<int>() > 0 && r.at("ts").get<double>() > d.at("ts").get<double>();
      }
      EXPECT_TRUE(resent) << "no retransmission for " << d.dump();
      EXPECT_TRUE(received) << "not received again after " << d.dump();
    }
  }
  return detections;
}

}  // namespace testing
}  // namespace ringguard
