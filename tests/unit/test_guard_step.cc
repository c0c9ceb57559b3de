// Steps: deferred verdicts (one read per step, every snapshot of the step restored on a detection) and the
// cross-rank agreement that makes every rank replay, skip or raise the same step.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "test_guard_util.h"

namespace ringguard {
namespace {

using guard_test::bitsOf;
using guard_test::buf;
using guard_test::policyWith;
using guard_test::rule;

constexpr size_t kN = 29;
constexpr int kSteps = 6;

// Two guarded ops per step; "decay" mutates the state "affine" mutated just before, plus a second tensor.
struct Model {
  std::vector<float> x, w, v, y, z;
  int fallbackRuns = 0;
  Model() : x(kN), w(kN), v(kN), y(kN), z(kN) {
    for (size_t i = 0; i < kN; ++i) w[i] = static_cast<float>(i % 6);
  }
  void feed(int step) {
    for (size_t i = 0; i < kN; ++i) x[i] = static_cast<float>((3 * step + static_cast<int>(i)) % 5);
  }
  void affine() {
    for (size_t i = 0; i < kN; ++i) {
      y[i] = x[i] * w[i] + 1.0f;
      w[i] += std::fmod(y[i], 7.0f) - 3.0f;
    }
  }
  void decay() {
    for (size_t i = 0; i < kN; ++i) {
      z[i] = w[i] * 2.0f + y[i];
      w[i] -= std::fmod(w[i], 3.0f);
      v[i] += std::fmod(z[i], 5.0f);
    }
  }
  GuardedOp affineOp() {
    GuardedOp o{"affine", {buf("x", x)}, {buf("w", w)}, {buf("y", y)}, [this] {
                  affine();
                  return Status::ok();
                }};
    o.fallback = [this] {
      ++fallbackRuns;
      affine();
      return Status::ok();
    };
    return o;
  }
  GuardedOp decayOp() {
    GuardedOp o{"decay", {buf("y", y)}, {buf("w", w), buf("v", v)}, {buf("z", z)}, [this] {
                  decay();
                  return Status::ok();
                }};
    return o;
  }
  // One step through the guard.
  Status step(Guard& g, int s, StepReport* report = nullptr) {
    feed(s);
    return g.runStep(
        [&] {
          GuardedOp a = affineOp();
          RINGGUARD_RETURN_IF_ERROR(g.run(a));
          GuardedOp d = decayOp();
          return g.run(d);
        },
        report);
  }
};

Model reference(int skipStep = -1) {
  Model m;
  for (int s = 0; s < kSteps; ++s) {
    if (s == skipStep) continue;
    m.feed(s);
    m.affine();
    m.decay();
  }
  return m;
}

GuardPolicy deferred(GuardAction onDetect, int replays = 2, GuardAction escalation = GuardAction::kRaise) {
  GuardPolicy p = policyWith(onDetect, replays, escalation);
  p.mode = VerdictMode::kDeferred;
  return p;
}

TEST(GuardStep, DeferredReplayRestoresEverySnapshotOfTheStep) {
  Guard g(deferred(GuardAction::kReplay), makeHostGuardBackend(), nullptr);
  EXPECT_TRUE(g.faults().addRule(rule("decay", 3, 1, FaultValue::kPosInf, 11)).isOk());
  Model m;
  for (int s = 0; s < kSteps; ++s) {
    StepReport r;
    ASSERT_TRUE(m.step(g, s, &r).isOk());
    EXPECT_EQ(s == 3 ? GuardResolution::kReplayed : GuardResolution::kClean, r.resolution) << s;
    EXPECT_EQ(s == 3 ? 2 : 1, r.attempts) << s;
  }
  const Model ref = reference();
  EXPECT_EQ(bitsOf(ref.w), bitsOf(m.w));
  EXPECT_EQ(bitsOf(ref.v), bitsOf(m.v));
  const GuardCounters c = g.counters();
  EXPECT_EQ(static_cast<uint64_t>(kSteps), c.steps);
  EXPECT_EQ(2u * kSteps, c.calls) << "a replayed step's calls are not counted again";
  EXPECT_EQ(1u, c.detections);
  EXPECT_EQ(1u, c.rollbacks);
  EXPECT_EQ(1u, c.replays);
  // 3 state tensors per step, 7 step runs.
  EXPECT_EQ(7u * 3u * kN * sizeof(float), c.bytesSnapshotted);
  EXPECT_EQ(0u, g.heldSnapshotBytes());
}

TEST(GuardStep, DeferredPersistentFaultRaisesAfterKStepReplaysWithTheStepRestored) {
  Guard g(deferred(GuardAction::kReplay, 2), makeHostGuardBackend(), nullptr);
  EXPECT_TRUE(g.faults().addRule(rule("affine", 2, 1000, FaultValue::kNaN, 0)).isOk());
  Model m;
  ASSERT_TRUE(m.step(g, 0).isOk());
  ASSERT_TRUE(m.step(g, 1).isOk());
  const std::vector<uint32_t> w = bitsOf(m.w), v = bitsOf(m.v);
  const Status st = m.step(g, 2);
  ASSERT_EQ(StatusCode::kCorruption, st.code());
  EXPECT_EQ(
      "guard: op 'affine' call 2: output 'y' has 1 non-finite value (first at index 0: nan); after 2 step "
      "replays and 0 fallbacks; raised; step restored",
      st.message());
  EXPECT_EQ(w, bitsOf(m.w));
  EXPECT_EQ(v, bitsOf(m.v));
  const GuardCounters c = g.counters();
  EXPECT_EQ(6u, c.detections) << "both ops are flagged on each of the 3 runs (decay consumed the NaN)";
  EXPECT_EQ(2u, c.replays);
  EXPECT_EQ(1u, c.escalations);
  EXPECT_EQ(1u, c.raised);
}

TEST(GuardStep, DeferredFallbackRunsTheFlaggedOpsFallbacks) {
  Guard g(deferred(GuardAction::kFallback, 0), makeHostGuardBackend(), nullptr);
  EXPECT_TRUE(g.faults().addRule(rule("affine", 1)).isOk());
  Model m;
  for (int s = 0; s < kSteps; ++s) {
    StepReport r;
    ASSERT_TRUE(m.step(g, s, &r).isOk());
    EXPECT_EQ(s == 1 ? GuardResolution::kFellBack : GuardResolution::kClean, r.resolution) << s;
  }
  EXPECT_EQ(1, m.fallbackRuns);
  EXPECT_EQ(bitsOf(reference().w), bitsOf(m.w));
  EXPECT_EQ(1u, g.counters().fallbacks);
}

TEST(GuardStep, DeferredSkipStep) {
  Guard g(deferred(GuardAction::kSkipStep), makeHostGuardBackend(), nullptr);
  EXPECT_TRUE(g.faults().addRule(rule("decay", 4, 1, FaultValue::kNegInf)).isOk());
  Model m;
  for (int s = 0; s < kSteps; ++s) {
    StepReport r;
    ASSERT_TRUE(m.step(g, s, &r).isOk());
    EXPECT_EQ(s == 4 ? GuardResolution::kSkipped : GuardResolution::kClean, r.resolution) << s;
  }
  EXPECT_EQ(bitsOf(reference(4).w), bitsOf(m.w));
  EXPECT_EQ(bitsOf(reference(4).v), bitsOf(m.v));
  EXPECT_EQ(1u, g.counters().skippedSteps);
}

TEST(GuardStep, DeferredNeedsAStepAndStepsDoNotNest) {
  Guard g(deferred(GuardAction::kReplay), makeHostGuardBackend(), nullptr);
  Model m;
  GuardedOp a = m.affineOp();
  Status st = g.run(a);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_EQ("guard: op 'affine': deferred mode reads verdicts at a step's end; call it inside runStep",
            st.message());
  st = g.runStep([&] { return g.runStep([] { return Status::ok(); }); });
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_EQ("guard: runStep does not nest", st.message());
}

TEST(GuardStep, ImmediateCallsInsideAStepReplayLocallyWithoutTouchingTheStep) {
  Guard g(policyWith(GuardAction::kReplay), makeHostGuardBackend(), nullptr);
  EXPECT_TRUE(g.faults().addRule(rule("affine", 2)).isOk());
  int agreements = 0;
  g.setAgreement([&](uint64_t* severity) {
    ++agreements;
    EXPECT_EQ(0u, *severity) << "a replay that succeeded locally changes nothing for the other ranks";
    return Status::ok();
  });
  Model m;
  for (int s = 0; s < kSteps; ++s) ASSERT_TRUE(m.step(g, s).isOk());
  EXPECT_EQ(kSteps, agreements);
  EXPECT_EQ(bitsOf(reference().w), bitsOf(m.w));
  EXPECT_EQ(1u, g.counters().replays);
}

// MAX over two "ranks" (threads), the shape of a MAX allreduce over a communicator.
class MaxOfTwo {
 public:
  GuardAgreement forRank(int rank) {
    return [this, rank](uint64_t* severity) {
      std::unique_lock<std::mutex> lock(mu_);
      values_[rank] = *severity;
      const uint64_t gen = generation_;
      if (++arrived_ == 2) {
        result_ = std::max(values_[0], values_[1]);
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
      } else {
        cv_.wait(lock, [&] { return generation_ != gen; });
      }
      *severity = result_;
      ++calls_[rank];
      return Status::ok();
    };
  }
  int calls(int rank) const { return calls_[rank]; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t values_[2] = {0, 0};
  uint64_t result_ = 0;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  int calls_[2] = {0, 0};
};

struct Rank {
  std::unique_ptr<Guard> guard;
  Model model;
  std::vector<Status> results;
};

void runRanks(Rank (&ranks)[2]) {
  std::thread t[2];
  for (int r = 0; r < 2; ++r) {
    t[r] = std::thread([&ranks, r] {
      for (int s = 0; s < kSteps; ++s) ranks[r].results.push_back(ranks[r].model.step(*ranks[r].guard, s));
    });
  }
  for (auto& th : t) th.join();
}

TEST(GuardStep, OneRanksDeferredDetectionMakesEveryRankReplayTheStep) {
  MaxOfTwo agreement;
  Rank ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r].guard = std::make_unique<Guard>(deferred(GuardAction::kReplay), makeHostGuardBackend(), nullptr);
    ranks[r].guard->setAgreement(agreement.forRank(r));
  }
  EXPECT_TRUE(ranks[0].guard->faults().addRule(rule("decay", 2, 1, FaultValue::kNaN, 3)).isOk());
  runRanks(ranks);
  const Model ref = reference();
  for (int r = 0; r < 2; ++r) {
    for (const Status& st : ranks[r].results) EXPECT_TRUE(st.isOk()) << st.toString();
    EXPECT_EQ(bitsOf(ref.w), bitsOf(ranks[r].model.w)) << "rank " << r;
    EXPECT_EQ(bitsOf(ref.v), bitsOf(ranks[r].model.v)) << "rank " << r;
    EXPECT_EQ(1u, ranks[r].guard->counters().replays) << "rank " << r;
    EXPECT_EQ(1u, ranks[r].guard->counters().rollbacks) << "rank " << r;
    EXPECT_EQ(kSteps + 1, agreement.calls(r));
  }
  EXPECT_EQ(1u, ranks[0].guard->counters().detections);
  EXPECT_EQ(0u, ranks[1].guard->counters().detections);
}

TEST(GuardStep, OneRanksSkipMakesEveryRankSkipTheStep) {
  MaxOfTwo agreement;
  Rank ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r].guard = std::make_unique<Guard>(policyWith(GuardAction::kReplay, 1, GuardAction::kSkipStep),
                                             makeHostGuardBackend(), nullptr);
    ranks[r].guard->setAgreement(agreement.forRank(r));
  }
  EXPECT_TRUE(ranks[1].guard->faults().addRule(rule("affine", 3, 1000, FaultValue::kPosInf, 8)).isOk());
  runRanks(ranks);
  const Model ref = reference(3);
  for (int r = 0; r < 2; ++r) {
    for (const Status& st : ranks[r].results) EXPECT_TRUE(st.isOk()) << st.toString();
    EXPECT_EQ(bitsOf(ref.w), bitsOf(ranks[r].model.w)) << "rank " << r;
    EXPECT_EQ(bitsOf(ref.v), bitsOf(ranks[r].model.v)) << "rank " << r;
    EXPECT_EQ(1u, ranks[r].guard->counters().skippedSteps) << "rank " << r;
  }
}

TEST(GuardStep, OneRanksRaiseReachesEveryRankAtTheStepsEnd) {
  MaxOfTwo agreement;
  Rank ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r].guard =
        std::make_unique<Guard>(policyWith(GuardAction::kRaise), makeHostGuardBackend(), nullptr);
    ranks[r].guard->setAgreement(agreement.forRank(r));
  }
  EXPECT_TRUE(ranks[0].guard->faults().addRule(rule("decay", 5, 1, FaultValue::kNaN, 1)).isOk());
  runRanks(ranks);
  const Model before = [] {
    Model m;
    for (int s = 0; s < kSteps - 1; ++s) {
      m.feed(s);
      m.affine();
      m.decay();
    }
    return m;
  }();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(static_cast<size_t>(kSteps), ranks[r].results.size());
    EXPECT_EQ(StatusCode::kCorruption, ranks[r].results.back().code()) << "rank " << r;
    EXPECT_EQ(bitsOf(before.w), bitsOf(ranks[r].model.w)) << "rank " << r;
  }
  EXPECT_EQ(
      "guard: op 'decay' call 5: output 'z' has 1 non-finite value (first at index 1: nan); after 0 replays "
      "and "
      "0 fallbacks; raised; state restored",
      ranks[0].results.back().message());
  EXPECT_EQ(
      "guard: another rank's guarded op found non-finite values past its policy (agreed severity 3); raised; "
      "step "
      "restored",
      ranks[1].results.back().message());
}

}  // namespace
}  // namespace ringguard

namespace ringguard {
namespace {

// The device-verdict step over host memory: the flag says whether the step saw a non-finite value; nothing
// is snapshotted, restored or waited for.
TEST(GuardStepToFlag, FlagIsSetByAFaultyStepOnlyAndNothingIsSnapshotted) {
  Guard g(deferred(GuardAction::kSkipStep), makeHostGuardBackend(), nullptr);
  EXPECT_TRUE(g.faults().addRule(rule("decay", 2, 1, FaultValue::kNaN, 4)).isOk());
  Model m;
  float flag = -1.0f;
  const GuardBuffer f{"flag", &flag, sizeof(float), DataType::kFloat32, MemoryKind::kHost};
  std::vector<float> flags;
  for (int s = 0; s < 4; ++s) {
    m.feed(s);
    ASSERT_TRUE(g.runStepToFlag(
                     [&] {
                       GuardedOp a = m.affineOp();
                       RINGGUARD_RETURN_IF_ERROR(g.run(a));
                       GuardedOp d = m.decayOp();
                       return g.run(d);
                     },
                     f, nullptr)
                    .isOk());
    flags.push_back(flag);
  }
  EXPECT_EQ((std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f}), flags);
  const GuardCounters c = g.counters();
  EXPECT_EQ(0u, c.bytesSnapshotted);
  EXPECT_EQ(0u, c.rollbacks);
  EXPECT_EQ(4u, c.steps);
  EXPECT_EQ(1u, c.injected);
}

TEST(GuardStepToFlag, BadUse) {
  float flag = 0;
  const GuardBuffer f{"flag", &flag, sizeof(float), DataType::kFloat32, MemoryKind::kHost};
  Guard immediate(policyWith(GuardAction::kReplay), makeHostGuardBackend(), nullptr);
  EXPECT_EQ("guard: runStepToFlag needs deferred mode",
            immediate.runStepToFlag([] { return Status::ok(); }, f, nullptr).message());
  Guard g(deferred(GuardAction::kSkipStep), makeHostGuardBackend(), nullptr);
  GuardBuffer wide = f;
  wide.dtype = DataType::kFloat64;
  wide.bytes = 8;
  double d = 0;
  wide.data = &d;
  EXPECT_EQ("guard: the step's flag must be one f32 element",
            g.runStepToFlag([] { return Status::ok(); }, wide, nullptr).message());
  EXPECT_EQ(
      "guard: runStepToFlag does not nest",
      g.runStepToFlag([&] { return g.runStepToFlag([] { return Status::ok(); }, f, nullptr); }, f, nullptr)
          .message());
  // After an error the guard is usable again.
  EXPECT_TRUE(g.runStepToFlag([] { return Status::ok(); }, f, nullptr).isOk());
}

}  // namespace
}  // namespace ringguard
