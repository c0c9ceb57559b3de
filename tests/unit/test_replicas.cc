// The replica check (docs/REPLICAS.md): fingerprint planning, the comparison of gathered fingerprints
// (majority with >= 3 replicas, both named with 2), the decision and its escalation, fault specs, and the
// checker end to end over loopback communicators (N ranks as threads, real verified collectives).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "loopback_util.h"
#include "ringguard/core/crc32.h"
#include "ringguard/replicas/communicator_exchange.h"
#include "ringguard/replicas/first_difference.h"
#include "ringguard/replicas/gradient_outliers.h"
#include "ringguard/replicas/replica_check.h"

namespace ringguard {
namespace {

ReplicaTensor hostTensor(const std::string& name, std::vector<float>* v) {
  ReplicaTensor t;
  t.name = name;
  t.data = v->data();
  t.bytes = v->size() * sizeof(float);
  return t;
}

ReplicaMessage message(uint64_t step, std::vector<uint32_t> crcs, uint32_t layout = 7) {
  ReplicaMessage m;
  m.step = step;
  m.layoutHash = layout;
  m.crcs = std::move(crcs);
  return m;
}

TEST(ReplicaFingerprint, BucketsGroupByKindAndCap) {
  std::vector<ReplicaTensor> t(7);
  for (size_t i = 0; i < t.size(); ++i) t[i].bytes = 4 * (i + 1);
  t[1].kind = t[3].kind = t[4].kind = MemoryKind::kDevice;  // interleaved, as Adam's CPU `step` makes them
  auto b = planFingerprintBuckets(t, 2);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].kind, MemoryKind::kHost);
  EXPECT_EQ(b[0].indices, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(b[0].bytes, 16u);
  EXPECT_EQ(b[1].indices, (std::vector<size_t>{5, 6}));
  EXPECT_EQ(b[2].kind, MemoryKind::kDevice);
  EXPECT_EQ(b[2].indices, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(b[3].indices, std::vector<size_t>{4});
  EXPECT_EQ(b[3].bytes, 20u);
  b = planFingerprintBuckets(t, 64);  // one call per kind
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].indices, (std::vector<size_t>{1, 3, 4}));
  EXPECT_TRUE(planFingerprintBuckets({}, 64).empty());
}

TEST(ReplicaFingerprint, HostCrcIsCoreCrcAndLayoutSeesNamesAndSizes) {
  std::vector<float> a = {1, 2, 3}, b = {};
  std::vector<ReplicaTensor> t = {hostTensor("param:a", &a), hostTensor("param:b", &b)};
  auto host = makeHostReplicaBackend();
  uint32_t crcs[2] = {1, 1};
  ASSERT_TRUE(host->fingerprint(t, {0, 1}, nullptr, crcs).isOk());
  EXPECT_EQ(crcs[0], crc32(a.data(), 12));
  EXPECT_EQ(crcs[1], 0u);
  const uint32_t layout = replicaLayoutHash(t);
  // The CRC of each name with its terminator, dtype byte and 64-bit size, end to end (chained here).
  uint32_t chained = 0;
  for (const ReplicaTensor& r : t) {
    chained = crc32(r.name.c_str(), r.name.size() + 1, chained);
    const uint8_t dtype = static_cast<uint8_t>(r.dtype);
    chained = crc32(&dtype, 1, chained);
    const uint64_t bytes = r.bytes;
    chained = crc32(&bytes, sizeof(bytes), chained);
  }
  EXPECT_EQ(layout, chained);
  t[1].dtype = DataType::kInt32;
  EXPECT_NE(replicaLayoutHash(t), layout);
  t[1].dtype = t[0].dtype;
  ASSERT_EQ(replicaLayoutHash(t), layout);
  t[1].name = "param:c";
  EXPECT_NE(replicaLayoutHash(t), layout);
  t[1].name = "param:b";
  t[0].bytes = 8;
  EXPECT_NE(replicaLayoutHash(t), layout);
}

TEST(ReplicaComparison, MessagesRoundTripAndBadOnesAreNamed) {
  const ReplicaMessage m = message(0x100000005ull, {9, 8});
  const auto w = m.encode();
  ReplicaMessage back;
  ASSERT_TRUE(ReplicaMessage::decode(w.data(), w.size(), 2, &back).isOk());
  EXPECT_EQ(back.step, 0x100000005ull);
  EXPECT_EQ(back.crcs, m.crcs);
  auto bad = w;
  bad[0] ^= 1;
  const Status st = ReplicaMessage::decode(bad.data(), bad.size(), 2, &back);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.toString();
}

TEST(ReplicaComparison, AgreementIsNoMismatch) {
  const auto c = compareReplicas({message(3, {1, 2}), message(3, {1, 2}), message(3, {1, 2})});
  EXPECT_FALSE(c.mismatch);
  EXPECT_TRUE(c.oddRanks.empty());
}

TEST(ReplicaComparison, MajorityNamesTheOddRank) {
  const auto c = compareReplicas(
      {message(3, {1, 2, 3}), message(3, {1, 2, 3}), message(3, {1, 5, 3}), message(3, {1, 2, 3})});
  ASSERT_TRUE(c.mismatch);
  EXPECT_TRUE(c.majority);
  EXPECT_EQ(c.oddRanks, std::vector<int>{2});
  EXPECT_EQ(c.tensors, std::vector<size_t>{1});
  EXPECT_EQ(c.source, 0);
  EXPECT_EQ(c.describe({"a", "b", "c"}), "rank 2 of 4 replicas differs from the majority in 1 tensor: 'b'");
}

TEST(ReplicaComparison, SourceAgreesWithTheMajorityEverywhere) {
  // Rank 0 is odd on tensor 0, rank 1 on tensor 1: rank 2 is the source.
  const auto c = compareReplicas({message(1, {9, 2}), message(1, {1, 9}), message(1, {1, 2})});
  ASSERT_TRUE(c.majority);
  EXPECT_EQ(c.oddRanks, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.source, 2);
  EXPECT_EQ(c.tensors, (std::vector<size_t>{0, 1}));
}

TEST(ReplicaComparison, TwoReplicasNameBoth) {
  const auto c = compareReplicas({message(4, {1, 2}), message(4, {1, 7})});
  ASSERT_TRUE(c.mismatch);
  EXPECT_FALSE(c.majority);
  EXPECT_EQ(c.oddRanks, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.source, -1);
  EXPECT_EQ(c.describe({"x", "y"}),
            "ranks 0, 1 of 2 replicas disagree and no majority names the odd one in 1 tensor: 'y'");
}

TEST(ReplicaComparison, NoStrictMajorityAmongFour) {
  const auto c = compareReplicas({message(0, {1}), message(0, {1}), message(0, {2}), message(0, {2})});
  ASSERT_TRUE(c.mismatch);
  EXPECT_FALSE(c.majority);
  EXPECT_EQ(c.oddRanks, (std::vector<int>{0, 1, 2, 3}));
}

TEST(ReplicaComparison, StructuralDifferencesAreNotCompared) {
  auto c = compareReplicas({message(3, {1}), message(4, {1})});
  EXPECT_TRUE(c.mismatch);
  EXPECT_NE(c.structural.find("rank 1 checked step 4 while rank 0 checked step 3"), std::string::npos)
      << c.structural;
  c = compareReplicas({message(3, {1}), message(3, {1}, 8)});
  EXPECT_NE(c.structural.find("rank 1 lists other tensors"), std::string::npos) << c.structural;
  c = compareReplicas({message(3, {1}), message(3, {1, 2})});
  EXPECT_NE(c.structural.find("(2 vs 1 tensors"), std::string::npos) << c.structural;
}

TEST(ReplicaDecision, PoliciesAndEscalation) {
  const auto odd2 = compareReplicas({message(5, {1}), message(5, {1}), message(5, {2})});
  const auto clean = compareReplicas({message(5, {1}), message(5, {1}), message(5, {1})});
  EXPECT_EQ(ReplicaDecider(ReplicaAction::kRaise).decide(clean, 5).action, ReplicaAction::kNone);
  EXPECT_EQ(ReplicaDecider(ReplicaAction::kRaise).decide(odd2, 5).action, ReplicaAction::kRaise);
  EXPECT_EQ(ReplicaDecider(ReplicaAction::kWarn).decide(odd2, 5).action, ReplicaAction::kWarn);

  ReplicaDecider repair(ReplicaAction::kRepair);
  auto d = repair.decide(odd2, 5);
  EXPECT_EQ(d.action, ReplicaAction::kRepair);
  EXPECT_FALSE(d.escalated);
  repair.noteRepaired(odd2, 5);
  d = repair.decide(odd2, 5);  // the check right after the repair, same step: not a repeat
  EXPECT_EQ(d.action, ReplicaAction::kRepair);
  d = repair.decide(odd2, 6);
  EXPECT_EQ(d.action, ReplicaAction::kRaise);
  EXPECT_TRUE(d.escalated);
  EXPECT_EQ(d.reason, "rank 2 mismatches again after its repair at step 5: a persistently faulty device");
  // Another rank going wrong later is a first offence.
  const auto odd0 = compareReplicas({message(9, {3}), message(9, {1}), message(9, {1})});
  EXPECT_EQ(repair.decide(odd0, 9).action, ReplicaAction::kRepair);

  const auto two = compareReplicas({message(1, {1}), message(1, {2})});
  d = ReplicaDecider(ReplicaAction::kRepair).decide(two, 1);
  EXPECT_EQ(d.action, ReplicaAction::kRaise);
  EXPECT_TRUE(d.escalated);
  EXPECT_NE(d.reason.find("no majority"), std::string::npos);
  const auto structural = compareReplicas({message(1, {1}), message(2, {1})});
  EXPECT_EQ(ReplicaDecider(ReplicaAction::kWarn).decide(structural, 1).action, ReplicaAction::kRaise);

  ReplicaAction a = ReplicaAction::kNone;
  EXPECT_TRUE(parseReplicaPolicy("repair", &a));
  EXPECT_EQ(a, ReplicaAction::kRepair);
  EXPECT_FALSE(parseReplicaPolicy("none", &a));
  EXPECT_FALSE(parseReplicaPolicy("Raise", &a));
}

TEST(ReplicaFault, ParsesAndLocates) {
  ReplicaFault f;
  bool on = true;
  ASSERT_TRUE(parseReplicaFault("", &f, &on).isOk());
  EXPECT_FALSE(on);
  ASSERT_TRUE(parseReplicaFault("rank=2,step=5,tensor=param:w,element=3,bit=30,repeat=4", &f, &on).isOk());
  EXPECT_TRUE(on);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.step, 5u);
  EXPECT_EQ(f.tensor, "param:w");
  EXPECT_EQ(f.toString(), "rank=2,step=5,tensor=param:w,element=3,bit=30,repeat=4");
  EXPECT_FALSE(f.hits(2, 4));
  EXPECT_TRUE(f.hits(2, 5));
  EXPECT_TRUE(f.hits(2, 8));
  EXPECT_FALSE(f.hits(2, 9));
  EXPECT_FALSE(f.hits(1, 5));

  for (const auto& [text, expect] : std::vector<std::pair<std::string, std::string>>{
           {"rank=1,step=2", "missing tensor"},
           {"rank=1,step=x,tensor=a", "step='x' is not a non-negative decimal integer"},
           {"rank=1,step=2,tensor=a,colour=3", "unknown key 'colour'"},
           {"rank=1,step=2,tensor=a,repeat=0", "repeat=0 would never fire"},
           {"rank=1,rank=2,step=2,tensor=a", "key 'rank' given twice"},
           {"rank=1,step", "'step' is not key=value"}}) {
    const Status st = parseReplicaFault(text, &f, &on);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(st.message().find("RINGGUARD_REPLICA_FAULT: " + expect), std::string::npos) << st.toString();
  }

  std::vector<float> w(4), b(2);
  std::vector<ReplicaTensor> t = {hostTensor("param:w", &w), hostTensor("param:b", &b)};
  ASSERT_TRUE(parseReplicaFault("rank=0,step=0,tensor=param:w,element=3,bit=30", &f, &on).isOk());
  size_t index = 9, offset = 9;
  uint8_t mask = 0;
  ASSERT_TRUE(locateReplicaFault(f, t, &index, &offset, &mask).isOk());
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(offset, 15u);  // element 3 = bytes 12..15, bit 30 in byte 3
  EXPECT_EQ(mask, 0x40);
  f.tensor = "#1";
  f.element = 2;
  EXPECT_NE(locateReplicaFault(f, t, &index, &offset, &mask)
                .message()
                .find("element 2 is past the end of "
                      "'param:b' (2 elements)"),
            std::string::npos);
  f.element = 0;
  f.bit = 32;
  EXPECT_NE(locateReplicaFault(f, t, &index, &offset, &mask).message().find("bit 32 is past the 32-bit"),
            std::string::npos);
  f.tensor = "param:q";
  EXPECT_NE(locateReplicaFault(f, t, &index, &offset, &mask).message().find("no tensor named 'param:q'"),
            std::string::npos);
}

// ---- The checker end to end over loopback communicators ---------------------------------------------------

constexpr int kSteps = 10;

// One replica's state: two "parameters" and an "optimizer state", updated identically on every rank.
struct Replica {
  std::vector<float> w = std::vector<float>(37), b = std::vector<float>(5), m = std::vector<float>(37);
  void update(int step) {
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = 0.5f * m[i] + static_cast<float>((step + static_cast<int>(i)) % 7);
      w[i] -= 0.25f * m[i];
    }
    for (size_t i = 0; i < b.size(); ++i) b[i] += static_cast<float>(step % 3);
  }
  std::vector<ReplicaTensor> tensors() {
    return {hostTensor("param:w", &w), hostTensor("param:b", &b), hostTensor("optim:w.momentum", &m)};
  }
};

struct RankRun {
  Status status;
  uint64_t failedStep = UINT64_MAX;
  ReplicaCounters counters;
  ReplicaReport report;
  uint32_t finalCrc = 0;
};

// `fault` (a RINGGUARD_REPLICA_FAULT spec; none when empty) set on `check`.
void setFault(ReplicaChecker& check, const std::string& fault) {
  if (fault.empty()) return;
  ReplicaFault f;
  bool on = false;
  ASSERT_TRUE(parseReplicaFault(fault, &f, &on).isOk());
  ASSERT_TRUE(check.setFault(f).isOk());
}

// The end of a run: the last verdict read (sync=False, the gate), the counters, the report, the final state.
void finishRun(ReplicaChecker& check, Replica* rep, RankRun* r) {
  if (r->status.isOk()) r->status = check.flush(kSteps - 1, rep->tensors());
  if (!r->status.isOk() && r->failedStep == UINT64_MAX) r->failedStep = kSteps;
  r->counters = check.counters();
  r->report = check.lastReport();
  r->finalCrc = crc32(rep->w.data(), rep->w.size() * 4, crc32(rep->m.data(), rep->m.size() * 4));
}

// Trains kSteps steps on every rank with a checker of `options`; `fault` (when set) on every rank.
std::vector<RankRun> train(int ranks, ReplicaCheckOptions options, const std::string& fault) {
  testing::LoopbackGroup g(ranks, testing::quietOptions());
  std::vector<RankRun> out(ranks);
  g.run([&](int rank, Communicator& comm) {
    ReplicaChecker check(options, makeCommunicatorExchange(&comm), makeHostReplicaBackend(), nullptr);
    ASSERT_NO_FATAL_FAILURE(setFault(check, fault));
    Replica rep;
    RankRun& r = out[rank];
    for (int step = 0; step < kSteps; ++step) {
      rep.update(step);
      // As the Python hook does: the tensors only on the steps that read them.
      r.status =
          check.afterStep(step, check.needsTensors(step) ? rep.tensors() : std::vector<ReplicaTensor>{});
      if (!r.status.isOk()) {
        r.failedStep = step;
        break;
      }
    }
    finishRun(check, &rep, &r);
  });
  return out;
}

ReplicaCheckOptions opts(ReplicaAction a, uint64_t every = 1, bool sync = true) {
  ReplicaCheckOptions o;
  o.onMismatch = a;
  o.every = every;
  o.sync = sync;
  return o;
}

TEST(ReplicaChecker, CleanRunNeverReports) {
  for (int ranks : {1, 2, 3}) {
    for (const RankRun& r : train(ranks, opts(ReplicaAction::kRaise), "")) {
      EXPECT_TRUE(r.status.isOk()) << r.status.toString();
      EXPECT_EQ(r.counters.checks, uint64_t(kSteps));
      EXPECT_EQ(r.counters.mismatches, 0u);
      EXPECT_EQ(r.counters.bytesFingerprinted, uint64_t(kSteps) * (37 + 5 + 37) * 4);
    }
  }
}

TEST(ReplicaChecker, RaiseOnEveryRankNamingTheRank) {
  const auto runs = train(3, opts(ReplicaAction::kRaise), "rank=1,step=4,tensor=param:w,element=7,bit=3");
  for (int rank = 0; rank < 3; ++rank) {
    const RankRun& r = runs[rank];
    EXPECT_EQ(r.status.code(), StatusCode::kCorruption) << rank;
    EXPECT_EQ(r.failedStep, 4u) << rank;
    EXPECT_EQ(r.status.message(),
              "replica check: step 4: rank 1 of 3 replicas differs from the majority in 1 tensor: 'param:w'; "
              "first differing element: 'param:w'[7] (on_mismatch=raise)")
        << rank;
    EXPECT_EQ(r.counters.injected, rank == 1 ? 1u : 0u);
    EXPECT_EQ(r.counters.raised, 1u);
    EXPECT_EQ(r.report.comparison.oddRanks, std::vector<int>{1});
    EXPECT_EQ(r.report.firstElements, std::vector<int64_t>{7});
    EXPECT_EQ(r.counters.locateRounds, 1u);  // 37 elements: one round of one-element chunks
  }
}

TEST(ReplicaChecker, TwoReplicasNameBoth) {
  const auto runs = train(2, opts(ReplicaAction::kRaise), "rank=0,step=2,tensor=#2,element=0,bit=31");
  for (const RankRun& r : runs) {
    EXPECT_EQ(r.failedStep, 2u);
    EXPECT_NE(r.status.message().find("ranks 0, 1 of 2 replicas disagree"), std::string::npos)
        << r.status.toString();
    EXPECT_NE(r.status.message().find("'optim:w.momentum'"), std::string::npos);
  }
}

TEST(ReplicaChecker, RepairGivesTheFaultFreeResult) {
  const auto reference = train(3, opts(ReplicaAction::kRaise), "");
  const auto runs =
      train(3, opts(ReplicaAction::kRepair), "rank=2,step=3,tensor=optim:w.momentum,element=5,bit=20");
  for (int rank = 0; rank < 3; ++rank) {
    const RankRun& r = runs[rank];
    EXPECT_TRUE(r.status.isOk()) << r.status.toString();
    EXPECT_EQ(r.finalCrc, reference[0].finalCrc) << rank;
    EXPECT_EQ(r.counters.repairs, 1u);
    EXPECT_EQ(r.counters.repairedTensors, 1u);
    EXPECT_EQ(r.counters.mismatches, 1u);
    EXPECT_EQ(r.counters.checks, uint64_t(kSteps) + 1);  // the check after the repair
  }
}

TEST(ReplicaChecker, PersistentFaultEscalates) {
  const auto runs =
      train(3, opts(ReplicaAction::kRepair), "rank=0,step=3,tensor=param:b,element=1,bit=1,repeat=100");
  for (const RankRun& r : runs) {
    EXPECT_EQ(r.failedStep, 4u);
    EXPECT_EQ(r.counters.repairs, 1u);
    EXPECT_EQ(r.counters.escalations, 1u);
    EXPECT_NE(r.status.message().find("rank 0 mismatches again after its repair at step 3: a persistently "
                                      "faulty device (on_mismatch=repair, escalated to raise)"),
              std::string::npos)
        << r.status.toString();
  }
}

TEST(ReplicaChecker, WarnContinuesAndEveryCatchesAtTheNextCheck) {
  const auto runs = train(3, opts(ReplicaAction::kWarn, 4), "rank=1,step=5,tensor=param:w,element=0,bit=22");
  for (const RankRun& r : runs) {
    EXPECT_TRUE(r.status.isOk());
    EXPECT_EQ(r.counters.checks, 2u);  // after steps 3 and 7
    EXPECT_EQ(r.counters.warnings, 1u);
    EXPECT_EQ(r.report.step, 7u);
    EXPECT_TRUE(r.report.mismatch);
    EXPECT_EQ(r.report.tensors, std::vector<std::string>{"param:w"});
  }
}

TEST(ReplicaChecker, NeedsTensorsOnChecksAndFaultStepsOnly) {
  testing::LoopbackGroup g(1, testing::quietOptions());
  g.run([&](int, Communicator& comm) {
    ReplicaChecker check(opts(ReplicaAction::kRaise, 4), makeCommunicatorExchange(&comm),
                         makeHostReplicaBackend(), nullptr);
    ReplicaFault f;
    bool on = false;
    ASSERT_TRUE(parseReplicaFault("rank=0,step=5,tensor=param:w,repeat=2", &f, &on).isOk());
    auto needed = [&check] {
      std::vector<uint64_t> steps;
      for (uint64_t step = 0; step < 12; ++step) {
        if (check.needsTensors(step)) steps.push_back(step);
      }
      return steps;
    };
    EXPECT_EQ(needed(), (std::vector<uint64_t>{3, 7, 11}));
    ASSERT_TRUE(check.setFault(f).isOk());
    EXPECT_EQ(needed(), (std::vector<uint64_t>{3, 5, 6, 7, 11}));
    // A step whose fault finds no tensor is an error, not a silent skip: the caller must pass them.
    EXPECT_FALSE(check.afterStep(5, {}).isOk());
  });
}

TEST(ReplicaChecker, RepairWithTwoReplicasEscalates) {
  const auto runs = train(2, opts(ReplicaAction::kRepair), "rank=1,step=1,tensor=param:w,element=0,bit=0");
  for (const RankRun& r : runs) {
    EXPECT_EQ(r.failedStep, 1u);
    EXPECT_NE(r.status.message().find("no majority to repair from (2 replicas"), std::string::npos)
        << r.status.toString();
  }
}

// sync=False: the verdict of the check after step k is read at the check after step k+1.
TEST(ReplicaChecker, DeferredVerdictIsReadAtTheNextCheck) {
  for (int ranks : {1, 3}) {
    for (const RankRun& r : train(ranks, opts(ReplicaAction::kRaise, 1, false), "")) {
      EXPECT_TRUE(r.status.isOk()) << r.status.toString();
      EXPECT_EQ(r.counters.checks, uint64_t(kSteps));  // the last one read by flush()
      EXPECT_EQ(r.counters.deferredWaits, 0u);         // host memory: always ready when read
    }
  }
  const auto runs =
      train(3, opts(ReplicaAction::kRaise, 1, false), "rank=2,step=4,tensor=param:b,element=3,bit=30");
  for (const RankRun& r : runs) {
    EXPECT_EQ(r.failedStep, 5u);
    EXPECT_EQ(r.report.step, 4u);
    EXPECT_EQ(r.report.readAtStep, 5u);
    EXPECT_EQ(r.status.message(),
              "replica check: step 4: rank 2 of 3 replicas differs from the majority in 1 tensor: 'param:b' "
              "(sync=False: read at the check after step 5); first differing element: 'param:b'[3] "
              "(on_mismatch=raise)");
  }
  // A flip after the last step is read by flush().
  for (const RankRun& r :
       train(3, opts(ReplicaAction::kRaise, 1, false), "rank=0,step=9,tensor=param:w,element=0,bit=1")) {
    EXPECT_EQ(r.failedStep, uint64_t(kSteps));
    EXPECT_EQ(r.report.step, 9u);
  }
}

TEST(ReplicaChecker, DeferredRepairAndEscalation) {
  const auto reference = train(3, opts(ReplicaAction::kRaise), "");
  // This toy replica exchanges no gradients, so nothing of the odd one spread before the repair: the
  // result is the fault-free one (the DDP test shows what does spread).
  for (const RankRun& r :
       train(3, opts(ReplicaAction::kRepair, 1, false), "rank=1,step=3,tensor=param:w,element=5,bit=20")) {
    EXPECT_TRUE(r.status.isOk()) << r.status.toString();
    EXPECT_EQ(r.finalCrc, reference[0].finalCrc);
    EXPECT_EQ(r.counters.repairs, 1u);
    EXPECT_EQ(r.counters.mismatches, 2u);  // the deferred verdict, then the comparison of the state repaired
  }
  for (const RankRun& r : train(3, opts(ReplicaAction::kRepair, 1, false),
                                "rank=0,step=3,tensor=param:b,element=1,bit=1,repeat=100")) {
    EXPECT_EQ(r.failedStep, 6u);  // repaired at 4 (verdict of 3), again at 5, read at 6: escalated
    EXPECT_EQ(r.counters.escalations, 1u);
    EXPECT_NE(r.status.message().find("rank 0 mismatches again after its repair at step 3"),
              std::string::npos)
        << r.status.toString();
  }
}

// The first differing element over several rounds of chunk CRCs, the same on every rank.
TEST(ReplicaFirstDifference, LocatesTheFirstDifferingElementOnEveryRank) {
  testing::LoopbackGroup g(3, testing::quietOptions());
  std::vector<int64_t> found(3, -2), same(3, -2), empty(3, -2);
  std::vector<uint64_t> rounds(3, 0);
  g.run([&](int rank, Communicator& comm) {
    auto exchange = makeCommunicatorExchange(&comm);
    auto host = makeHostReplicaBackend();
    std::vector<float> v(100003);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000);
    std::vector<float> w = v, none;
    if (rank == 1) v[77777] = -1.0f, v[99999] = -2.0f;
    if (rank == 2) v[88888] = -3.0f;
    ASSERT_TRUE(locateFirstDifference(hostTensor("param:v", &v), host.get(), exchange.get(), nullptr,
                                      &found[rank], &rounds[rank])
                    .isOk());
    uint64_t ignored = 0;
    ASSERT_TRUE(locateFirstDifference(hostTensor("param:w", &w), host.get(), exchange.get(), nullptr,
                                      &same[rank], &ignored)
                    .isOk());
    ASSERT_TRUE(locateFirstDifference(hostTensor("param:e", &none), host.get(), exchange.get(), nullptr,
                                      &empty[rank], &ignored)
                    .isOk());
  });
  EXPECT_EQ(found, std::vector<int64_t>(3, 77777));
  EXPECT_EQ(rounds, std::vector<uint64_t>(3, 3));  // 100003 -> 1563 -> 25 -> 1 elements per chunk
  EXPECT_EQ(same, std::vector<int64_t>(3, -1));
  EXPECT_EQ(empty, std::vector<int64_t>(3, -1));
}

TEST(GradientOutliers, TheMedianOfTheOthersNamesTheOddRank) {
  // Clean: within the factor of the others' median, both ways.
  EXPECT_TRUE(findGradientOutliers({1.0, 2.0, 3.0, 0.5}, 8.0).ranks.empty());
  EXPECT_TRUE(findGradientOutliers({4.0}, 8.0).ranks.empty());
  EXPECT_TRUE(findGradientOutliers({0.0, 0.0, 0.0}, 8.0).ranks.empty());  // no gradient anywhere
  // Rank 2 at 100x: named with its ratio to the median of ranks 0, 1, 3 (2.0).
  GradientOutliers o = findGradientOutliers({1.0, 2.0, 200.0, 3.0}, 8.0);
  EXPECT_EQ(o.ranks, std::vector<int>{2});
  EXPECT_EQ(o.ratios, std::vector<double>{100.0});
  EXPECT_EQ(o.describe(7, 1),
            "gradient outliers: step 7, bucket 1: rank 2 at 100x the median norm of the other ranks");
  // Too small counts too (a device that computed zeros), and a non-finite norm always.
  EXPECT_EQ(findGradientOutliers({1.0, 0.0625, 1.0}, 8.0).ranks, std::vector<int>{1});
  EXPECT_EQ(findGradientOutliers({1.0, 1.0, std::numeric_limits<double>::quiet_NaN()}, 8.0).ranks,
            std::vector<int>{2});
  // Three ranks, one at 700x: only it (the mean of its two others would have named all three).
  EXPECT_EQ(findGradientOutliers({1.7, 1.3, 919.0}, 8.0).ranks, std::vector<int>{2});
  EXPECT_EQ(findGradientOutliers({1.7, 0.0, 1.3}, 8.0).ranks, std::vector<int>{1});
  // Two ranks: the other one is the median, so both are named.
  EXPECT_EQ(findGradientOutliers({1.0, 9.0}, 8.0).ranks, (std::vector<int>{0, 1}));
  EXPECT_TRUE(findGradientOutliers({1.0, 7.9}, 8.0).ranks.empty());
}

TEST(ReplicaChecker, OptionsAreChecked) {
  EXPECT_EQ(ReplicaChecker::validate(opts(ReplicaAction::kRaise, 0)).message(),
            "replica check: every=0: expected >= 1");
  EXPECT_FALSE(ReplicaChecker::validate(opts(ReplicaAction::kNone)).isOk());
}

// ---- The gate (docs/REPLICAS.md, "The gate"), its checker side on the CPU ---------------------------------
// The device gate holds a CUDA stream (tests/python/test_replicas.py runs it on the GPU). Here a gate of host
// memory stands for it: the training loop plays the stream, waiting at each closed gate for the release
// before its next update, while the checker's verdict thread decides and repairs over a communicator of its
// own (a second loopback group), as the Python check does over a group of its own.
namespace {

class HostPending final : public ReplicaPending {
 public:
  explicit HostPending(std::vector<uint32_t> all) : all_(std::move(all)) {}
  bool ready() override { return true; }
  Status take(std::vector<uint32_t>* all) override {
    *all = all_;
    return Status::ok();
  }

 private:
  std::vector<uint32_t> all_;
};

class HostGate final : public ReplicaGate {
 public:
  // holdsHost: the training loop waits at the gate before it changes anything (the test's tensors are all
  // host memory); false: as the device gate, it holds the "device" only, so host tensors are not repaired.
  // expired: every gate passed its deadline (the verdict thread "stalled").
  explicit HostGate(bool holdsHost = true, bool expired = false) : holdsHost_(holdsHost), expired_(expired) {}
  bool holdsHostTensors() const override { return holdsHost_; }
  Status hold(const uint32_t* words, size_t wordsPerRank, int ranks, uint64_t epoch, void*,
              std::unique_ptr<ReplicaPending>* out) override {
    std::vector<uint32_t> all(words, words + wordsPerRank * size_t(ranks));
    bool differ = false;
    for (size_t i = wordsPerRank; i < all.size(); ++i) differ |= all[i] != all[i % wordsPerRank];
    std::lock_guard<std::mutex> lock(mu_);
    if (differ) closed_.push_back(epoch);
    *out = std::make_unique<HostPending>(std::move(all));
    return Status::ok();
  }
  void release(uint64_t epoch) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = std::max(released_, epoch);
    }
    cv_.notify_all();
  }
  uint64_t expired() const override { return expired_ ? kOpenAll : 0; }
  // The stream at the gate of `epoch`: passes at once when that check was clean, else when released.
  bool pass(uint64_t epoch) {
    std::unique_lock<std::mutex> lock(mu_);
    if (std::find(closed_.begin(), closed_.end(), epoch) == closed_.end()) return true;
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return released_ >= epoch; });
  }
  size_t closedGates() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_.size();
  }
  uint64_t released() {
    std::lock_guard<std::mutex> lock(mu_);
    return released_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> closed_;
  uint64_t released_ = 0;
  bool holdsHost_;
  bool expired_;
};

// gatherOnDevice over the training communicator (host words standing for device memory); the verdict
// thread's collectives over the check's own.
class GatedExchange final : public ReplicaExchange {
 public:
  GatedExchange(Communicator* training, Communicator* verdict)
      : training_(makeCommunicatorExchange(training)), verdict_(makeCommunicatorExchange(verdict)) {}
  int rank() const override { return verdict_->rank(); }
  int size() const override { return verdict_->size(); }
  Status allGather(const std::vector<uint32_t>& mine, std::vector<uint32_t>* all) override {
    return verdict_->allGather(mine, all);
  }
  Status broadcast(const ReplicaTensor& t, int root, void* stream) override {
    return verdict_->broadcast(t, root, stream);
  }
  Status gatherOnDevice(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>&,
                        const std::vector<size_t>&, void*, const uint32_t** words) override {
    gathered_.emplace_back();
    RINGGUARD_RETURN_IF_ERROR(training_->allGather(mine, &gathered_.back()));
    *words = gathered_.back().data();
    return Status::ok();
  }

 private:
  std::unique_ptr<ReplicaExchange> training_, verdict_;
  std::deque<std::vector<uint32_t>> gathered_;
};

struct GatedRun {
  RankRun run;
  std::string aborted;           // what the checker aborted the training group with
  uint64_t releasedAtAbort = 0;  // the gate's released epoch when it did
  bool abortAgreed = false;      // the abort was for a verdict every rank reached
  size_t closedGates = 0;
};

std::vector<GatedRun> trainGated(int ranks, ReplicaAction policy, const std::string& fault,
                                 bool holdsHost = true, bool expired = false) {
  testing::LoopbackGroup training(ranks, testing::quietOptions()), verdict(ranks, testing::quietOptions());
  std::vector<GatedRun> out(ranks);
  testing::runRanks(ranks, [&](int rank) {
    ReplicaChecker check(opts(policy),
                         std::make_unique<GatedExchange>(&training.comm(rank), &verdict.comm(rank)),
                         makeHostReplicaBackend(), nullptr);
    auto gate = std::make_unique<HostGate>(holdsHost, expired);
    HostGate* g = gate.get();
    GatedRun& o = out[rank];
    ASSERT_TRUE(check
                    .useGate(std::move(gate), nullptr,
                             [&o, g, &training, rank](const std::string& why, bool agreed) {
                               training.comm(rank).abort(why);  // as the Python check aborts its group
                               o.abortAgreed = agreed;
                               o.aborted = why;
                               o.releasedAtAbort = g->released();
                             })
                    .isOk());
    ASSERT_NO_FATAL_FAILURE(setFault(check, fault));
    Replica rep;
    RankRun& r = o.run;
    for (int step = 0; step < kSteps; ++step) {
      rep.update(step);
      r.status = check.afterStep(step, rep.tensors());
      if (!r.status.isOk()) {
        r.failedStep = step;
        break;
      }
      ASSERT_TRUE(g->pass(uint64_t(step) + 1)) << "the gate of step " << step << " was never released";
    }
    finishRun(check, &rep, &r);
    o.closedGates = g->closedGates();
  });
  return out;
}

}  // namespace

TEST(ReplicaGate, CleanChecksPassAndARepairBeforeTheNextStepLeavesNoTrace) {
  for (const GatedRun& r : trainGated(3, ReplicaAction::kRaise, "")) {
    EXPECT_TRUE(r.run.status.isOk()) << r.run.status.toString();
    EXPECT_EQ(r.run.counters.gatedChecks, uint64_t(kSteps));
    EXPECT_EQ(r.run.counters.checks, uint64_t(kSteps));
    EXPECT_EQ(r.closedGates, 0u);
    EXPECT_TRUE(r.aborted.empty());
  }
  const auto reference = train(3, opts(ReplicaAction::kRaise), "");
  for (const GatedRun& r :
       trainGated(3, ReplicaAction::kRepair, "rank=2,step=3,tensor=optim:w.momentum,element=5,bit=20")) {
    EXPECT_TRUE(r.run.status.isOk()) << r.run.status.toString();
    EXPECT_EQ(r.run.finalCrc, reference[0].finalCrc);
    EXPECT_EQ(r.run.counters.repairs, 1u);
    EXPECT_EQ(r.run.counters.checks, uint64_t(kSteps) + 1);
    EXPECT_EQ(r.closedGates, 1u);  // the gate of step 3 held the "stream" until the repair was checked
    EXPECT_TRUE(r.aborted.empty());
  }
}

TEST(ReplicaGate, ARaiseAbortsTheTrainingGroupBeforeTheReleaseAndTheNextCheckReturnsIt) {
  const std::string expected =
      "replica check: step 4: rank 1 of 3 replicas differs from the majority in 1 tensor: 'param:w'; first "
      "differing element: 'param:w'[7] (on_mismatch=raise)";
  for (const GatedRun& r :
       trainGated(3, ReplicaAction::kRaise, "rank=1,step=4,tensor=param:w,element=7,bit=3")) {
    EXPECT_EQ(r.aborted, expected);
    EXPECT_LT(r.releasedAtAbort, 5u);  // step 4's check is epoch 5: aborted before its gate opened
    EXPECT_TRUE(r.abortAgreed);
    EXPECT_EQ(r.run.failedStep, 5u);  // the check after the next step returns the verdict
    EXPECT_EQ(r.run.status.code(), StatusCode::kCorruption);
    EXPECT_EQ(r.run.status.message(), expected);
    EXPECT_EQ(r.run.report.step, 4u);
    EXPECT_EQ(r.run.counters.raised, 1u);
  }
  // A gate that holds the device alone (as the CUDA one): a host tensor that differs is raised, not repaired
  // (the training thread has changed host tensors since the check).
  for (const GatedRun& r : trainGated(3, ReplicaAction::kRepair, "rank=2,step=3,tensor=param:b,bit=4",
                                      /*holdsHost=*/false)) {
    EXPECT_NE(
        r.aborted.find("'param:b' is host memory, which the training thread has moved on since the gated "
                       "check: not repairable (on_mismatch=repair, escalated to raise)"),
        std::string::npos)
        << r.aborted;
    EXPECT_EQ(r.run.counters.repairs, 0u);
    EXPECT_EQ(r.run.failedStep, 4u);
  }
  // A repair that cannot be made (2 replicas) escalates to the same abort and raise.
  for (const GatedRun& r : trainGated(2, ReplicaAction::kRepair, "rank=1,step=1,tensor=param:w,bit=0")) {
    EXPECT_NE(r.aborted.find("no majority to repair from (2 replicas"), std::string::npos) << r.aborted;
    EXPECT_EQ(r.run.failedStep, 2u);
  }
  testing::LoopbackGroup one(1, testing::quietOptions());
  one.run([](int, Communicator& comm) {
    ReplicaChecker deferred(opts(ReplicaAction::kRaise, 1, false), makeCommunicatorExchange(&comm),
                            makeHostReplicaBackend(), nullptr);
    const Status st = deferred.useGate(std::make_unique<HostGate>(), nullptr, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("sync=False"), std::string::npos) << st.toString();
  });
}

// A gate whose deadline passed before its verdict (the verdict thread stalled): a failure of this rank alone
// (not an agreed verdict), which aborts its training group, so no rank hangs: each ends at a later check, at
// flush(), or in a training all-gather its peer aborted, whichever comes first.
TEST(ReplicaGate, AGateThatRanOutOfTimeIsThisRanksFailureAndNoRankHangs) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const GatedRun& r : trainGated(2, ReplicaAction::kRaise, "", /*holdsHost=*/true, /*expired=*/true)) {
    EXPECT_FALSE(r.run.status.isOk());
    EXPECT_EQ(
        r.aborted,
        "replica check: step 0: the gate's deadline (RINGGUARD_TIMEOUT_MS) passed before its verdict was "
        "settled; the steps queued behind it ran on this rank unchecked");
    EXPECT_FALSE(r.abortAgreed);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
      << "a rank waited for a peer whose gate ran out";
}

}  // namespace
}  // namespace ringguard
