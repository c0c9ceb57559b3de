// The guard's state machine in immediate mode, over host memory: replay, escalation, fallback, zero /
// clamp, skip, raise, and the counters each path moves.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_guard_util.h"

namespace ringguard {
namespace {

using guard_test::Affine;
using guard_test::bitsOf;
using guard_test::hostGuard;
using guard_test::policyWith;
using guard_test::rule;

constexpr size_t kN = 37;  // odd: no element count is a multiple of a vector
constexpr int kSteps = 10;

// The fault-free run every faulty run must reproduce bit for bit.
std::vector<uint32_t> referenceWeights() {
  Affine a(kN);
  for (int s = 0; s < kSteps; ++s) {
    a.feed(s);
    a.compute();
  }
  return bitsOf(a.w);
}

TEST(Guard, CleanRunSnapshotsStateAndChangesNothing) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay));
  Affine a(kN);
  for (int s = 0; s < kSteps; ++s) {
    a.feed(s);
    GuardedOp op = a.op();
    CallReport r;
    ASSERT_TRUE(guard->run(op, &r).isOk());
    EXPECT_EQ(GuardResolution::kClean, r.resolution);
    EXPECT_EQ(1, r.attempts);
    EXPECT_EQ(static_cast<uint64_t>(s), r.call);
  }
  EXPECT_EQ(referenceWeights(), bitsOf(a.w));
  const GuardCounters c = guard->counters();
  EXPECT_EQ(10u, c.calls);
  EXPECT_EQ(0u, c.detections);
  EXPECT_EQ(0u, c.rollbacks);
  EXPECT_EQ(10u * kN * sizeof(float), c.bytesSnapshotted);
  EXPECT_EQ(0u, guard->heldSnapshotBytes());
  EXPECT_EQ(kSteps, a.bodyRuns);
}

TEST(Guard, ReplayAfterInjectedFaultsIsBitIdenticalToAFaultFreeRun) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 2));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 3, 1, FaultValue::kNaN, 0)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 7, 1, FaultValue::kPosInf, 5)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 8, 1, FaultValue::kNegInf, kN - 1)).isOk());
  Affine a(kN);
  for (int s = 0; s < kSteps; ++s) {
    a.feed(s);
    GuardedOp op = a.op();
    CallReport r;
    ASSERT_TRUE(guard->run(op, &r).isOk());
    const bool faulty = s == 3 || s == 7 || s == 8;
    EXPECT_EQ(faulty ? GuardResolution::kReplayed : GuardResolution::kClean, r.resolution) << "step " << s;
    EXPECT_EQ(faulty ? 2 : 1, r.attempts) << "step " << s;
  }
  EXPECT_EQ(referenceWeights(), bitsOf(a.w));
  const GuardCounters c = guard->counters();
  EXPECT_EQ(3u, c.injected);
  EXPECT_EQ(3u, c.detections);
  EXPECT_EQ(3u, c.rollbacks);
  EXPECT_EQ(3u, c.replays);
  EXPECT_EQ(0u, c.escalations);
  EXPECT_EQ(0u, c.fallbacks);
  EXPECT_EQ(13, a.bodyRuns);
}

TEST(Guard, AFaultDuringTheReplayIsHandledTheSameWay) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 3));
  EXPECT_TRUE(guard->faults()
                  .addRule(rule("affine", 4, 3))
                  .isOk());  // the first run and the first two replays are hit
  Affine a(kN);
  for (int s = 0; s < kSteps; ++s) {
    a.feed(s);
    GuardedOp op = a.op();
    CallReport r;
    ASSERT_TRUE(guard->run(op, &r).isOk());
    if (s == 4) {
      EXPECT_EQ(GuardResolution::kReplayed, r.resolution);
      EXPECT_EQ(4, r.attempts);
    }
  }
  EXPECT_EQ(referenceWeights(), bitsOf(a.w));
  const GuardCounters c = guard->counters();
  EXPECT_EQ(3u, c.detections);
  EXPECT_EQ(3u, c.replays);
  EXPECT_EQ(0u, c.escalations);
}

TEST(Guard, PersistentFaultEscalatesAfterKReplaysAndRaisesWithTheWholeStory) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 3, GuardAction::kRaise));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 2, 1000, FaultValue::kNaN, 4)).isOk());
  Affine a(kN);
  std::vector<uint32_t> before;
  Status st;
  for (int s = 0; s < 3; ++s) {
    a.feed(s);
    before = bitsOf(a.w);
    GuardedOp op = a.op();
    st = guard->run(op);
  }
  ASSERT_EQ(StatusCode::kCorruption, st.code());
  EXPECT_EQ(
      "guard: op 'affine' call 2: output 'y' has 1 non-finite value (first at index 4: nan); after 3 replays "
      "and 0 fallbacks; raised; state restored",
      st.message());
  EXPECT_EQ(before, bitsOf(a.w)) << "the state must be what it was before the failing call";
  const GuardCounters c = guard->counters();
  EXPECT_EQ(4u, c.detections);
  EXPECT_EQ(3u, c.replays);
  EXPECT_EQ(1u, c.escalations);
  EXPECT_EQ(1u, c.raised);
  EXPECT_EQ(4u, c.rollbacks);
  EXPECT_EQ(2 + 4, a.bodyRuns) << "K replays and no more: the guard never loops";
  EXPECT_EQ(0u, guard->heldSnapshotBytes());
}

TEST(Guard, RaiseNamesEveryBadTensorAndTheFirstBadValue) {
  GuardPolicy p = policyWith(GuardAction::kRaise);
  auto guard = hostGuard(p);
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 1, FaultValue::kNegInf, 9)).isOk());
  Affine a(kN);
  a.feed(0);
  GuardedOp op = a.op();
  op.body = [&a] {
    a.compute();
    a.w[2] = std::nanf("");  // the op poisons its state too (scanned: scanState is on by default)
    a.w[30] = INFINITY;
    return Status::ok();
  };
  const Status st = guard->run(op);
  ASSERT_EQ(StatusCode::kCorruption, st.code());
  EXPECT_EQ(
      "guard: op 'affine' call 0: output 'y' has 1 non-finite value (first at index 9: -inf); also state 'w' "
      "(2); "
      "after 0 replays and 0 fallbacks; raised; state restored",
      st.message());
  Affine fresh(kN);
  EXPECT_EQ(bitsOf(fresh.w), bitsOf(a.w));
  EXPECT_EQ(0u, guard->counters().replays);
  EXPECT_EQ(0u, guard->counters().escalations) << "raise as the first response is not an escalation";
}

// A real overflow, not an injected one: the op squares large values in f32 (inf), the fallback in f64.
TEST(Guard, FallbackIsTakenAfterTheReplaysAndIsWithinTolerance) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 1, GuardAction::kFallback));
  std::vector<float> x = {3e19f, -2e19f, 1.0f, 0.5f}, y(4);
  GuardedOp op;
  op.name = "square";
  op.inputs = {guard_test::buf("x", x)};
  op.outputs = {guard_test::buf("y", y)};
  int fast = 0, reference = 0;
  op.body = [&] {
    ++fast;
    for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] * x[i]) * 1e-30f;  // x*x overflows f32 first
    return Status::ok();
  };
  op.fallback = [&] {
    ++reference;
    for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(double(x[i]) * double(x[i]) * 1e-30);
    return Status::ok();
  };
  CallReport r;
  ASSERT_TRUE(guard->run(op, &r).isOk());
  EXPECT_EQ(GuardResolution::kFellBack, r.resolution);
  EXPECT_EQ(3, r.attempts);
  EXPECT_EQ(2, fast);
  EXPECT_EQ(1, reference);
  // Stated tolerance: the fallback's result is the exact product of the f32 inputs rounded once to f32
  // (at most 0.5 ulp, 2^-24 relative).
  for (size_t i = 0; i < 4; ++i) {
    const double exact = double(x[i]) * double(x[i]) * 1e-30;
    EXPECT_TRUE(std::isfinite(y[i]));
    EXPECT_NEAR(exact, y[i], std::abs(exact) * 0x1p-24) << i;
  }
  const GuardCounters c = guard->counters();
  EXPECT_EQ(2u, c.detections);
  EXPECT_EQ(1u, c.replays);
  EXPECT_EQ(1u, c.fallbacks);
  EXPECT_EQ(1u, c.escalations);
}

TEST(Guard, FallbackAsTheFirstResponse) {
  auto guard = hostGuard(policyWith(GuardAction::kFallback, 0, GuardAction::kSkipStep));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0)).isOk());
  Affine a(kN);
  a.feed(0);
  GuardedOp op = a.op();
  CallReport r;
  ASSERT_TRUE(guard->run(op, &r).isOk());
  EXPECT_EQ(GuardResolution::kFellBack, r.resolution);
  EXPECT_EQ(1, a.bodyRuns);
  EXPECT_EQ(1, a.fallbackRuns);
  Affine ref(kN);
  ref.feed(0);
  ref.compute();
  EXPECT_EQ(bitsOf(ref.w), bitsOf(a.w));
  EXPECT_EQ(bitsOf(ref.y), bitsOf(a.y));
}

TEST(Guard, AnOpWithoutAFallbackGoesToTheNextAction) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 1, GuardAction::kFallback));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 1000)).isOk());
  Affine a(kN);
  a.feed(0);
  GuardedOp op = a.op();
  op.fallback = nullptr;
  const Status st = guard->run(op);
  EXPECT_EQ(StatusCode::kCorruption, st.code()) << st.toString();  // afterFallback defaults to raise
  EXPECT_EQ(0u, guard->counters().fallbacks);
}

TEST(Guard, ZeroReplacesNonFiniteValuesAndKeepsTheResult) {
  auto guard = hostGuard(policyWith(GuardAction::kZero));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 1, FaultValue::kNaN, 2)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 1, FaultValue::kPosInf, 3)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 1, FaultValue::kNegInf, 4)).isOk());
  Affine a(kN), ref(kN);
  a.feed(0);
  ref.feed(0);
  ref.compute();
  GuardedOp op = a.op();
  CallReport r;
  ASSERT_TRUE(guard->run(op, &r).isOk());
  EXPECT_EQ(GuardResolution::kSanitized, r.resolution);
  std::vector<float> expect = ref.y;
  expect[2] = expect[3] = expect[4] = 0.0f;
  EXPECT_EQ(bitsOf(expect), bitsOf(a.y));
  EXPECT_EQ(bitsOf(ref.w), bitsOf(a.w)) << "the state keeps the op's update (no rollback)";
  EXPECT_EQ(1u, guard->counters().sanitized);
  EXPECT_EQ(0u, guard->counters().rollbacks);
}

TEST(Guard, ClampMapsNanToZeroAndInfinitiesToTheFiniteRange) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 1, GuardAction::kClamp));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 2, FaultValue::kNaN, 2)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 2, FaultValue::kPosInf, 3)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 2, FaultValue::kNegInf, 4)).isOk());
  Affine a(kN), ref(kN);
  a.feed(0);
  ref.feed(0);
  ref.compute();
  GuardedOp op = a.op();
  CallReport r;
  ASSERT_TRUE(guard->run(op, &r).isOk());
  EXPECT_EQ(GuardResolution::kSanitized, r.resolution);
  std::vector<float> expect = ref.y;
  expect[2] = 0.0f;
  expect[3] = FLT_MAX;
  expect[4] = -FLT_MAX;
  EXPECT_EQ(bitsOf(expect), bitsOf(a.y));
  EXPECT_EQ(bitsOf(ref.w), bitsOf(a.w)) << "the replay ran on the restored state, once";
  EXPECT_EQ(1u, guard->counters().escalations);
}

TEST(Guard, SkipStepOutsideAStepRestoresTheCallsState) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 1, GuardAction::kSkipStep));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 1, 1000, FaultValue::kPosInf, 7)).isOk());
  Affine a(kN);
  a.feed(0);
  GuardedOp op0 = a.op();
  ASSERT_TRUE(guard->run(op0).isOk());
  const std::vector<uint32_t> before = bitsOf(a.w);
  a.feed(1);
  GuardedOp op1 = a.op();
  CallReport r;
  ASSERT_TRUE(guard->run(op1, &r).isOk());
  EXPECT_EQ(GuardResolution::kSkipped, r.resolution);
  EXPECT_EQ(before, bitsOf(a.w));
  EXPECT_EQ(1u, guard->counters().skippedSteps);
  EXPECT_EQ(1u, guard->counters().escalations);
}

// The documented blind spot: a wrong finite value is not a non-finite one.
TEST(Guard, LargeFiniteValuesAreNotCaught) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay));
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 0, 1, FaultValue::kLargeFinite, 6)).isOk());
  Affine a(kN);
  a.feed(0);
  GuardedOp op = a.op();
  CallReport r;
  ASSERT_TRUE(guard->run(op, &r).isOk());
  EXPECT_EQ(GuardResolution::kClean, r.resolution);
  EXPECT_EQ(FLT_MAX, a.y[6]);
  EXPECT_EQ(1u, guard->counters().injected);
  EXPECT_EQ(0u, guard->counters().detections);
}

TEST(Guard, FaultsTargetTheNamedOpAndCallOnly) {
  auto guard = hostGuard(policyWith(GuardAction::kRaise));
  EXPECT_TRUE(guard->faults().addRule(rule("other", 0)).isOk());
  EXPECT_TRUE(guard->faults().addRule(rule("affine", 5)).isOk());
  Affine a(kN);
  for (int s = 0; s < 3; ++s) {
    a.feed(s);
    GuardedOp op = a.op();
    ASSERT_TRUE(guard->run(op).isOk());
  }
  EXPECT_EQ(0u, guard->counters().injected);
}

TEST(Guard, FaultRulesThatCouldNeverFireAreRefusedNamingTheField) {
  auto guard = hostGuard(policyWith(GuardAction::kRaise));
  struct Case {
    GuardFaultRule r;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back(
      {rule("affine", 0, 0), "guard fault rule for op 'affine': attempts must be at least 1, got 0"});
  GuardFaultRule p = rule("affine", 0);
  p.probability = 2.0;
  cases.push_back({p, "probability must be in [0, 1], got 2"});
  p.probability = std::nan("");
  cases.push_back({p, "probability must be in [0, 1], got nan"});
  cases.push_back({rule("affine", -2), "call must be -1 (every call) or a call index, got -2"});
  GuardFaultRule o = rule("affine", 0);
  o.output = -3;
  cases.push_back({o, "output must be -1 (every target) or a target index, got -3"});
  for (const Case& c : cases) {
    const Status st = guard->faults().addRule(c.r);
    EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
    EXPECT_NE(std::string::npos, st.message().find(c.message)) << st.message();
  }
  EXPECT_FALSE(guard->faults().enabled());  // none of them was kept
  Affine a(kN);
  a.feed(0);
  GuardedOp op = a.op();
  ASSERT_TRUE(guard->run(op).isOk());
  EXPECT_EQ(0u, guard->counters().injected);
}

TEST(Guard, TheOpsOwnErrorRestoresItsStateAndPassesThrough) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay));
  Affine a(kN);
  a.feed(0);
  const std::vector<uint32_t> before = bitsOf(a.w);
  GuardedOp op = a.op();
  op.body = [&a] {
    a.compute();
    return Status(StatusCode::kInternal, "kernel failed");
  };
  const Status st = guard->run(op);
  EXPECT_EQ(StatusCode::kInternal, st.code());
  EXPECT_EQ("kernel failed", st.message());
  EXPECT_EQ(before, bitsOf(a.w));
}

TEST(Guard, ScanInputsFindsAPoisonedInput) {
  GuardPolicy p = policyWith(GuardAction::kRaise);
  p.scanInputs = true;
  auto guard = hostGuard(p);
  Affine a(kN);
  a.feed(0);
  a.x[11] = std::nanf("");
  GuardedOp op = a.op();
  const Status st = guard->run(op);
  ASSERT_EQ(StatusCode::kCorruption, st.code());
  // y[11] = nan * w + 1 is poisoned too; the output is named first, then the input.
  EXPECT_NE(std::string::npos, st.message().find("also state 'w' (1), input 'x' (1)")) << st.message();
}

}  // namespace
}  // namespace ringguard

namespace ringguard {
namespace {

// An op that only mutates has no outputs: fault targets continue with its state tensors.
TEST(Guard, FaultsCanTargetStateTensorsAfterTheOutputs) {
  auto guard = guard_test::hostGuard(guard_test::policyWith(GuardAction::kReplay));
  GuardFaultRule r = guard_test::rule("affine", 1, 1, FaultValue::kPosInf, 2);
  r.output = 1;  // outputs: y (0); state: w (1)
  EXPECT_TRUE(guard->faults().addRule(r).isOk());
  guard_test::Affine a(9), ref(9);
  for (int s = 0; s < 3; ++s) {
    a.feed(s);
    ref.feed(s);
    ref.compute();
    GuardedOp op = a.op();
    CallReport rep;
    ASSERT_TRUE(guard->run(op, &rep).isOk());
    EXPECT_EQ(s == 1 ? GuardResolution::kReplayed : GuardResolution::kClean, rep.resolution);
  }
  EXPECT_EQ(guard_test::bitsOf(ref.w), guard_test::bitsOf(a.w));
  EXPECT_EQ(1u, guard->counters().injected);
}

// Complex outputs: the scan sees a NaN in an imaginary part, an injected fault lands in the real part of
// the element it names, and the replay restores the state bit for bit.
TEST(Guard, ComplexOutputsAreScannedByPartAndReplayed) {
  auto guard = hostGuard(policyWith(GuardAction::kReplay, 2));
  EXPECT_TRUE(guard->faults().addRule(rule("rotate", 1, 1, FaultValue::kPosInf, 4)).isOk());
  std::vector<float> z(2 * 6), out(2 * 6);  // 6 complex64 values, state and output
  for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>(i);
  std::vector<float> seen;  // the output after the injection, before the replay
  int runs = 0;
  GuardedOp op;
  op.name = "rotate";
  op.state = {GuardBuffer{"z", z.data(), z.size() * sizeof(float), DataType::kComplex64, MemoryKind::kHost}};
  op.outputs = {
      GuardBuffer{"out", out.data(), out.size() * sizeof(float), DataType::kComplex64, MemoryKind::kHost}};
  op.body = [&] {
    ++runs;
    for (size_t k = 0; k < 6; ++k) {  // out = i * z, z += 1 (exact)
      out[2 * k] = -z[2 * k + 1];
      out[2 * k + 1] = z[2 * k];
      z[2 * k] += 1.0f;
    }
    return Status::ok();
  };
  for (int call = 0; call < 3; ++call) {
    CallReport r;
    ASSERT_TRUE(guard->run(op, &r).isOk());
    EXPECT_EQ(call == 1 ? GuardResolution::kReplayed : GuardResolution::kClean, r.resolution) << call;
  }
  EXPECT_EQ(4, runs);  // the faulty call ran twice
  EXPECT_EQ(1u, guard->counters().detections);
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_EQ(static_cast<float>(2 * k) + 3.0f, z[2 * k]) << k;  // three increments, none twice
    EXPECT_EQ(static_cast<float>(2 * k + 1), z[2 * k + 1]) << k;
  }

  // Raise names the complex element, whichever part is bad.
  auto raising = hostGuard(policyWith(GuardAction::kRaise));
  op.body = [&] {
    out.assign(out.size(), 0.0f);
    out[2 * 5 + 1] = std::nanf("");
    return Status::ok();
  };
  const Status st = raising->run(op);
  ASSERT_EQ(StatusCode::kCorruption, st.code());
  EXPECT_NE(std::string::npos,
            st.message().find("output 'out' has 1 non-finite value (first at index 5: nan)"))
      << st.message();
}

// float8 outputs (e5m2 and e4m3fn, one byte per element): injected values land as the format allows (e4m3fn
// has no Inf: an injected +-Inf is its NaN), the scan finds them, and clamp maps e5m2's infinities to +-57344
// (0x7b, 0xfb) and every NaN to 0. Raise shows the value.
TEST(Guard, Float8OutputsAreScannedInjectedAndClamped) {
  for (DataType t : {DataType::kFloat8E5M2, DataType::kFloat8E4M3}) {
    const bool e5m2 = t == DataType::kFloat8E5M2;
    auto guard = hostGuard(policyWith(GuardAction::kReplay, 1, GuardAction::kClamp));
    EXPECT_TRUE(guard->faults().addRule(rule("cast", 0, 2, FaultValue::kNaN, 2)).isOk());
    EXPECT_TRUE(guard->faults().addRule(rule("cast", 0, 2, FaultValue::kPosInf, 3)).isOk());
    EXPECT_TRUE(guard->faults().addRule(rule("cast", 0, 2, FaultValue::kNegInf, 4)).isOk());
    std::vector<uint8_t> out(kN, 0);
    GuardedOp op;
    op.name = "cast";
    op.outputs = {GuardBuffer{"out", out.data(), out.size(), t, MemoryKind::kHost}};
    op.body = [&] {
      out.assign(kN, 0x38);  // 1.0 in e4m3fn, 0.5 in e5m2
      return Status::ok();
    };
    CallReport r;
    ASSERT_TRUE(guard->run(op, &r).isOk()) << dataTypeName(t);
    EXPECT_EQ(GuardResolution::kSanitized, r.resolution) << dataTypeName(t);
    std::vector<uint8_t> expect(kN, 0x38);
    expect[2] = 0x00;
    expect[3] = e5m2 ? 0x7b : 0x00;
    expect[4] = e5m2 ? 0xfb : 0x00;
    EXPECT_EQ(expect, out) << dataTypeName(t);
    EXPECT_EQ(2u, guard->counters().detections) << dataTypeName(t);  // the call and its replay

    auto raising = hostGuard(policyWith(GuardAction::kRaise));
    EXPECT_TRUE(raising->faults().addRule(rule("cast", 0, 1, FaultValue::kPosInf, 5)).isOk());
    const Status st = raising->run(op);
    ASSERT_EQ(StatusCode::kCorruption, st.code()) << st.toString();
    const std::string want =
        std::string("output 'out' has 1 non-finite value (first at index 5: ") + (e5m2 ? "+inf)" : "nan)");
    EXPECT_NE(std::string::npos, st.message().find(want)) << st.message();
  }
}

}  // namespace
}  // namespace ringguard
