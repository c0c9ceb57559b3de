// The timeline and the run summary (issue 18): the bounded recorder, then a faulty run over the loopback
// transport whose Chrome trace is read back with a JSON parser and checked against the counters.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/trace_events.h"
#include "loopback_util.h"
#include "ringguard/observability/observability.h"
#include "ringguard/policy/engine.h"
#include "ringguard/policy/rules.h"
#include "ringguard/telemetry/sampler.h"
#include "ringguard/telemetry/trace.h"
#include "test_guard_util.h"
#include "timeline_checks.h"

namespace ringguard {
namespace {

using nlohmann::json;
using testing::checkFaultyRun;
using testing::checkTraceFormat;
using testing::eventsOfTrack;
using testing::LoopbackGroup;
using testing::makeInput;
using testing::TrackEvents;
using testing::trackLabels;

TEST(TraceRecorder, KeepsTheFirstCapacityEventsAndCountsTheRest) {
  trace::Recorder r(4);
  for (int i = 0; i < 6; ++i) {
    trace::Event e;
    e.a = i;
    r.record(e);
  }
  const std::vector<trace::Event> got = r.snapshot();
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[size_t(i)].a, i);
  EXPECT_EQ(r.dropped(), 2u);
  EXPECT_EQ(r.capacity(), 4u);
}

TEST(TraceRecorder, ConcurrentRecordersLoseNothingThatFits) {
  constexpr int kThreads = 4, kEach = 5000;
  trace::Recorder r(size_t(kThreads) * kEach / 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&r, t] {
      for (int i = 0; i < kEach; ++i) {
        trace::Event e;
        e.a = t;
        e.b = i;
        r.record(e);
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::vector<trace::Event> got = r.snapshot();
  EXPECT_EQ(got.size(), r.capacity());
  EXPECT_EQ(r.dropped(), uint64_t(kThreads) * kEach - r.capacity());
  std::set<std::pair<int, int>> unique;
  std::map<int, int> lastOf;  // each thread's events keep their order
  for (const trace::Event& e : got) {
    EXPECT_TRUE(unique.insert({e.a, e.b}).second) << "event recorded twice";
    auto it = lastOf.find(e.a);
    if (it != lastOf.end()) EXPECT_LT(it->second, e.b);
    lastOf[e.a] = e.b;
  }
}

TEST(TraceEvents, InternKeepsOneCopyPerText) {
  const char* a = trace::intern("policy: attention flash -> math");
  const char* b = trace::intern(std::string("policy: attention flash -> ") + "math");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "policy: attention flash -> math");
}

TEST(Timeline, FaultyRunHasMatchingEventsOnEveryRank) {
  observability::startTimeline(size_t(1) << 20);  // false if an earlier test started it: same buffer
  ASSERT_TRUE(trace::on());
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1000;  // 4000 bytes: many 256-byte slices per block
  Options o;
  o.sliceBytes = 256;
  o.timeout = std::chrono::milliseconds(20000);
  // Corruptions in allreduce 0 (two), allgather 2 and broadcast 3 (root 1, so into rank 2): each is detected
  // and resent once.
  o.fault.schedule = {{0, 0, 1, 1}, {0, 2, 0, 2}, {2, 1, 2, 0}, {3, 0, 0, 2}};
  LoopbackGroup g(kRanks, o);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, rank, kCount);
    std::vector<uint8_t> out(in.size() * kRanks);
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(c.allgather(in.data(), out.data(), kCount, DataType::kInt32).isOk());
    ASSERT_TRUE(c.broadcast(in.data(), out.data(), kCount, DataType::kInt32, 1).isOk());
    ASSERT_TRUE(c.reduceScatter(out.data(), in.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
  });

  const json timeline = json::parse(observability::timelineJson());
  checkTraceFormat(timeline);
  std::vector<TrackEvents> events;
  for (int r = 0; r < kRanks; ++r) events.push_back(eventsOfTrack(timeline, g.comm(r).summary().track, r));
  const uint64_t detected = checkFaultyRun(
      events, g.counters(), {"allreduce", "allreduce", "allgather", "broadcast", "reduce_scatter"});
  EXPECT_EQ(detected, o.fault.schedule.size());
  // The track names say which communicator is which.
  const std::map<uint32_t, std::string> labels = trackLabels(timeline);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(labels.at(g.comm(r).summary().track), "comm (loopback, rank " + std::to_string(r) + " of 3)");
  }
}

// A send/recv's control messages are on the timeline with the exchange's own message number: the sender
// sends the fingerprint and receives the verdict, the receiver the other way round.
TEST(Timeline, SendRecvControlMessagesCarryTheExchangeNumber) {
  observability::startTimeline(size_t(1) << 20);
  ASSERT_TRUE(trace::on());
  Options o;
  o.sliceBytes = 256;
  o.timeout = std::chrono::milliseconds(20000);
  LoopbackGroup g(2, o);
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> buf(100, rank);
    // A collective first: the group's next number is then 1, which the exchanges must not take.
    ASSERT_TRUE(c.allreduce(buf.data(), buf.data(), 4, DataType::kInt32, ReduceOp::kSum).isOk());
    for (int i = 0; i < 2; ++i) {  // exchanges 0 and 1 from rank 0 to rank 1
      const Status st = rank == 0 ? c.sendRecv(buf.data(), buf.size(), 1, nullptr, 0, -1, DataType::kInt32)
                                  : c.sendRecv(nullptr, 0, -1, buf.data(), buf.size(), 0, DataType::kInt32);
      ASSERT_TRUE(st.isOk()) << st.toString();
    }
  });
  const json timeline = json::parse(observability::timelineJson());
  checkTraceFormat(timeline);
  for (int r = 0; r < 2; ++r) {
    const TrackEvents t = eventsOfTrack(timeline, g.comm(r).summary().track, r);
    std::vector<std::string> got;  // "<name> seq <n> peer <p> received <0|1>" in order
    for (const json& e : t.controls) {
      const json& a = e.at("args");
      if (!a.contains("peer")) continue;
      got.push_back(e.at("name").get<std::string>() + " seq " + std::to_string(a.at("seq").get<int>()) +
                    " peer " + std::to_string(a.at("peer").get<int>()) + " received " +
                    std::to_string(a.at("received").get<int>()));
    }
    const std::string peer = std::to_string(1 - r), fp = r == 0 ? "0" : "1", vd = r == 0 ? "1" : "0";
    std::vector<std::string> want;
    for (int seq = 0; seq < 2; ++seq) {
      const std::string n = std::to_string(seq);
      want.push_back("fingerprint seq " + n + " peer " + peer + " received " + fp);
      want.push_back("verdict seq " + n + " peer " + peer + " received " + vd);
    }
    EXPECT_EQ(got, want) << "rank " << r;
    // The exchanges' spans carry their own numbers too (0 and 1), not the group's next collective number.
    std::vector<std::string> spans;
    for (const json& e : t.collectives) {
      spans.push_back(e.at("name").get<std::string>() + " " +
                      std::to_string(e.at("args").at("seq").get<int>()));
    }
    EXPECT_EQ(spans, (std::vector<std::string>{"allreduce 0", "sendrecv 0", "sendrecv 1"})) << "rank " << r;
  }
}

TEST(Summary, MatchesTheCountersAndIsWrittenToFiles) {
  constexpr int kRanks = 2;
  Options o;
  o.sliceBytes = 128;
  o.timeout = std::chrono::milliseconds(20000);
  o.fault.schedule = {{1, 0, 0, 0}};
  LoopbackGroup g(kRanks, o);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, rank, 100);
    std::vector<uint8_t> out(in.size() * kRanks);
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 100, DataType::kFloat32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(c.allgather(in.data(), out.data(), 100, DataType::kFloat32).isOk());
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 50, DataType::kFloat32, ReduceOp::kSum).isOk());
    EXPECT_EQ(c.allreduce(in.data(), out.data(), 10, DataType::kFloat32, ReduceOp::kBand).code(),
              StatusCode::kInvalidArgument);
  });
  const json summary = json::parse(observability::summaryJson());
  for (int r = 0; r < kRanks; ++r) {
    const CommunicatorSummary mine = g.comm(r).summary();
    const json* entry = nullptr;
    for (const json& c : summary.at("communicators")) {
      if (c.at("track") == mine.track) entry = &c;
    }
    ASSERT_NE(entry, nullptr) << "rank " << r << " missing from " << summary.dump();
    EXPECT_EQ(entry->at("rank"), r);
    EXPECT_EQ(entry->at("size"), kRanks);
    EXPECT_EQ(entry->at("transport"), "loopback");
    EXPECT_TRUE(entry->at("live").get<bool>());
    const Counters c = g.comm(r).counters();
    c.forEach(
        [&](const char* name, uint64_t value) { EXPECT_EQ(entry->at("counters").at(name), value) << name; });
    const json& ar = entry->at("collectives").at("allreduce");
    EXPECT_EQ(ar.at("calls"), 3);
    EXPECT_EQ(ar.at("failed"), 1);  // the BAND on float32
    EXPECT_EQ(ar.at("bytes"), (100 + 50 + 10) * 4);
    EXPECT_EQ(entry->at("collectives").at("allgather").at("bytes"), 100 * 4 * kRanks);
    EXPECT_EQ(entry->at("counters").at("collectives"), 3);
    EXPECT_EQ(entry->at("counters").at("detected"), r == 0 ? 1 : 0);
    EXPECT_NE(entry->at("first_error").get<std::string>().find("allreduce on rank"), std::string::npos);
  }
  // Files: <prefix>.<rank>.json, both valid JSON.
  const std::string prefix = ::testing::TempDir() + "rg_obs_test";
  ASSERT_TRUE(observability::writeFiles(prefix + "_timeline", prefix + "_summary").isOk());
  for (const std::string& kind : {"_timeline", "_summary"}) {
    // The first communicator of this process names the file (an earlier test's, in the whole suite).
    const std::string path = prefix + kind + "." + std::to_string(observability::fileRank()) + ".json";
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path;
    const json j = json::parse(f);
    EXPECT_TRUE(kind == "_timeline" ? j.contains("traceEvents") : j.contains("communicators")) << path;
    std::remove(path.c_str());
  }
  const Status bad = observability::writeFiles("/nonexistent-dir/x", "");
  EXPECT_EQ(bad.code(), StatusCode::kInternal);
  EXPECT_NE(bad.message().find("cannot write /nonexistent-dir/x." +
                               std::to_string(observability::fileRank()) + ".json"),
            std::string::npos)
      << bad.message();
}

// The guard's actions are on the timeline (its own track, the op as the detail) and in the summary's event
// counts, one for one with its counters.
TEST(Timeline, GuardEventsMatchTheGuardsCounters) {
  observability::startTimeline(size_t(1) << 20);
  const json before = json::parse(observability::summaryJson()).at("events");
  const size_t eventsBefore = trace::snapshot().size();
  auto guard = guard_test::hostGuard(guard_test::policyWith(GuardAction::kReplay, 2));
  EXPECT_TRUE(guard->faults().addRule(guard_test::rule("traced_affine", 1, 1, FaultValue::kNaN, 0)).isOk());
  EXPECT_TRUE(
      guard->faults().addRule(guard_test::rule("traced_affine", 3, 2, FaultValue::kPosInf, 2)).isOk());
  guard_test::Affine a(8);
  for (int s = 0; s < 5; ++s) {
    a.feed(s);
    GuardedOp op = a.op("traced_affine");
    ASSERT_TRUE(guard->run(op).isOk());
  }
  const GuardCounters c = guard->counters();
  ASSERT_EQ(c.detections, 3u);  // call 1 once, call 3 twice
  std::map<std::string, uint64_t> seen;
  const std::vector<trace::Event> events = trace::snapshot();
  for (size_t i = eventsBefore; i < events.size(); ++i) {
    const trace::Event& e = events[i];
    if (e.kind != trace::Kind::kGuard) continue;
    EXPECT_STREQ(e.detail, "traced_affine");
    seen[e.name]++;
  }
  EXPECT_EQ(seen["guard detect"], c.detections);
  EXPECT_EQ(seen["guard restore"], c.rollbacks);
  EXPECT_EQ(seen["guard replay"], c.replays);
  const json after = json::parse(observability::summaryJson()).at("events");
  EXPECT_EQ(after.at("guard_detections").get<uint64_t>() - before.at("guard_detections").get<uint64_t>(),
            c.detections);
  EXPECT_EQ(after.at("guard_replays").get<uint64_t>() - before.at("guard_replays").get<uint64_t>(),
            c.replays);
  const std::map<uint32_t, std::string> labels = trackLabels(json::parse(observability::timelineJson()));
  bool guardTrack = false;
  for (const auto& [tid, label] : labels) guardTrack |= label == "guard";
  EXPECT_TRUE(guardTrack);
}

// Downgrade decisions are on the timeline with the signals behind them.
TEST(Timeline, DowngradeDecisions) {
  observability::startTimeline(size_t(1) << 20);
  const std::string data = std::string(RINGGUARD_SOURCE_DIR) + "/tests/unit/data/policy/";
  PolicyRules rules;
  ASSERT_TRUE(loadRulesFile(data + "rules_small.json", "", &rules).isOk());
  PolicyEngine engine(rules);
  std::vector<TraceRecord> recs;
  ASSERT_TRUE(readTrace(data + "fragmentation.jsonl", &recs).isOk());
  const size_t eventsBefore = trace::snapshot().size();
  for (const TraceRecord& r : recs) ASSERT_TRUE(engine.onStep(r.sample).isOk());
  const std::vector<PolicyDecision> decisions = engine.decisions();
  ASSERT_GE(decisions.size(), 2u);
  std::vector<std::string> details;
  const std::vector<trace::Event> events = trace::snapshot();
  for (size_t i = eventsBefore; i < events.size(); ++i) {
    if (events[i].kind == trace::Kind::kDowngrade) details.push_back(events[i].detail);
  }
  ASSERT_EQ(details.size(), decisions.size());
  for (size_t i = 0; i < decisions.size(); ++i) EXPECT_EQ(details[i], decisions[i].toString());
}

// The telemetry sampler's signals are counter tracks: every present signal of every sample, at the
// sample's time; missing ones are not drawn as values.
TEST(Timeline, TelemetrySamplesAreCounterTracks) {
  observability::startTimeline(size_t(1) << 20);
  struct Source : TelemetrySource {
    const char* name() const override { return "obs"; }
    void sample(int64_t, std::vector<Signal>* out) override {
      ++n;
      out->push_back(Signal::present("obs.level", 10.0 * n, "count", "obs"));
      out->push_back(Signal::absent("obs.gone", "count", "obs", "not supported here"));
    }
    int n = 0;
  };
  Sampler sampler(std::chrono::milliseconds(1000));
  sampler.add(std::make_unique<Source>());
  const size_t eventsBefore = trace::snapshot().size();
  std::vector<int64_t> times;
  for (int i = 0; i < 3; ++i) times.push_back(sampler.sampleNow().timeNs);
  std::vector<trace::Event> counters;
  const std::vector<trace::Event> events = trace::snapshot();
  for (size_t i = eventsBefore; i < events.size(); ++i) {
    if (events[i].kind == trace::Kind::kCounter) counters.push_back(events[i]);
  }
  ASSERT_EQ(counters.size(), 3u);
  for (size_t i = 0; i < counters.size(); ++i) {
    EXPECT_STREQ(counters[i].name, "obs.level");
    EXPECT_EQ(counters[i].real, 10.0 * double(i + 1));
    EXPECT_EQ(counters[i].tsNs, uint64_t(times[i]));
  }
  // Exported as a "C" event whose args name the series.
  bool found = false;
  const json timeline = json::parse(observability::timelineJson());
  for (const json& e : timeline.at("traceEvents")) {
    if (e.at("ph") == "C" && e.at("name") == "obs.level" && e.at("args").at("obs.level") == 30.0)
      found = true;
  }
  EXPECT_TRUE(found);
}

// Every call has its enqueue instant, which says whether its caller ran it at once without the queue
// (direct 1: a synchronous call on an idle communicator, src/runtime/caller_run.cc) or queued it (direct 0:
// an Async call).
TEST(Timeline, AnEnqueueSaysWhetherTheCallerRanItDirectly) {
  observability::startTimeline(size_t(1) << 20);
  constexpr int kRanks = 2;
  LoopbackGroup g(kRanks, Options{});
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> a(6, rank + 1), b(6 * kRanks), one(1, rank);
    // Async then waited for: once it returns the runner is free, so the synchronous calls below run direct.
    ASSERT_TRUE(
        c.allreduceAsync(a.data(), a.data(), a.size(), DataType::kInt32, ReduceOp::kSum)->wait().isOk());
    ASSERT_TRUE(c.allreduce(a.data(), a.data(), a.size(), DataType::kInt32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(c.reduceScatter(b.data(), a.data(), 6, DataType::kInt32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(c.allgather(a.data(), b.data(), 6, DataType::kInt32).isOk());
    ASSERT_TRUE(c.broadcast(a.data(), a.data(), a.size(), DataType::kInt32, 0).isOk());
    ASSERT_TRUE(c.alltoall(b.data(), b.data() + kRanks, 1, DataType::kInt32).isOk());
    const int peer = 1 - rank;
    ASSERT_TRUE(c.sendRecv(a.data(), 1, peer, one.data(), 1, peer, DataType::kInt32).isOk());
  });
  const json timeline = json::parse(observability::timelineJson());
  const std::vector<std::string> kinds = {"allreduce", "allreduce", "reduce_scatter", "allgather",
                                          "broadcast", "alltoall",  "sendrecv"};
  for (int r = 0; r < kRanks; ++r) {
    const TrackEvents t = eventsOfTrack(timeline, g.comm(r).summary().track, r);
    ASSERT_EQ(t.enqueues.size(), kinds.size()) << "rank " << r;
    ASSERT_EQ(t.collectives.size(), kinds.size()) << "rank " << r;
    for (size_t i = 0; i < kinds.size(); ++i) {
      EXPECT_EQ(t.enqueues[i].at("name"), kinds[i]) << "rank " << r;
      EXPECT_EQ(t.enqueues[i].at("args").at("direct"), i == 0 ? 0 : 1) << "rank " << r << " " << kinds[i];
      EXPECT_EQ(t.collectives[i].at("name"), kinds[i]) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace ringguard
