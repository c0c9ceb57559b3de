// Bad use of the guard gets a clear error; the policy ladder, the fault injector and the host backend's
// dtype handling are exact.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/float16.h"
#include "test_guard_util.h"

namespace ringguard {
namespace {

using guard_test::Affine;
using guard_test::buf;
using guard_test::hostGuard;
using guard_test::policyWith;
using guard_test::rule;

Status runOnce(Guard& g, GuardedOp op) { return g.run(op); }

TEST(GuardUse, NullRaggedAndDeviceBuffersWithoutADeviceBackend) {
  auto g = hostGuard(policyWith(GuardAction::kReplay));
  Affine a(8);
  GuardedOp op = a.op();
  op.state[0].data = nullptr;
  Status st = runOnce(*g, op);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_EQ("guard: op 'affine': state 'w' is null", st.message());

  op = a.op();
  op.outputs[0].bytes = 10;
  st = runOnce(*g, op);
  EXPECT_EQ("guard: op 'affine': output 'y' has 10 bytes, not a whole number of f32 elements", st.message());

  op = a.op();
  op.inputs[0].kind = MemoryKind::kDevice;
  st = runOnce(*g, op);
  EXPECT_EQ("guard: op 'affine': input 'x' is device memory, but this guard has no device backend",
            st.message());

  op = a.op();
  op.body = nullptr;
  EXPECT_EQ("guard: op 'affine': no body to run", runOnce(*g, op).message());
  op = a.op();
  op.name.clear();
  EXPECT_EQ("guard: a guarded op needs a name", runOnce(*g, op).message());
  EXPECT_EQ(0, a.bodyRuns) << "a rejected declaration never runs the op";
}

TEST(GuardUse, OverlappingDeclarations) {
  auto g = hostGuard(policyWith(GuardAction::kReplay));
  Affine a(8);
  GuardedOp op = a.op();
  // An in-place op declared twice: as state and as its output.
  op.outputs[0] =
      GuardBuffer{"w_out", a.w.data() + 4, 4 * sizeof(float), DataType::kFloat32, MemoryKind::kHost};
  Status st = runOnce(*g, op);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_EQ(
      "guard: op 'affine': state 'w' overlaps output 'w_out' (declare a tensor the op changes in place once, "
      "as "
      "state)",
      st.message());
  op = a.op();
  op.state.push_back(GuardBuffer{"w2", a.w.data() + 7, sizeof(float), DataType::kFloat32, MemoryKind::kHost});
  EXPECT_EQ(
      "guard: op 'affine': state 'w' overlaps state 'w2' (declare a tensor the op changes in place once, as "
      "state)",
      runOnce(*g, op).message());
  // Inputs may alias each other (nothing writes them), and adjacent buffers do not overlap.
  op = a.op();
  op.inputs.push_back(op.inputs[0]);
  op.inputs[1].name = "x_again";
  EXPECT_TRUE(runOnce(*g, op).isOk());
}

TEST(GuardUse, StateLargerThanTheSnapshotBudget) {
  GuardPolicy p = policyWith(GuardAction::kReplay);
  p.snapshotBudgetBytes = 100;
  auto g = hostGuard(p);
  Affine a(26);  // 104 bytes of state
  const Status st = runOnce(*g, a.op());
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_EQ(
      "guard: op 'affine': its state needs a snapshot of 104 bytes, 0 are held already, and the snapshot "
      "budget "
      "is 100 bytes",
      st.message());
  // In a step, snapshots add up.
  GuardPolicy q = policyWith(GuardAction::kReplay);
  q.snapshotBudgetBytes = 150;
  auto h = hostGuard(q);
  Affine b(25);
  const Status stepSt = h->runStep([&] {
    RINGGUARD_RETURN_IF_ERROR(h->run(b.op()));
    return h->run(b.op());
  });
  EXPECT_EQ(
      "guard: op 'affine': its state needs a snapshot of 100 bytes, 100 are held already, and the snapshot "
      "budget "
      "is 150 bytes",
      stepSt.message());
  EXPECT_EQ(0u, h->heldSnapshotBytes());
}

TEST(GuardUse, CheckInputsCatchesAnOpThatWritesAnUndeclaredInput) {
  GuardPolicy p = policyWith(GuardAction::kReplay);
  p.checkInputs = true;
  auto g = hostGuard(p);
  Affine a(8);
  a.feed(0);
  const auto w = guard_test::bitsOf(a.w);
  GuardedOp op = a.op();
  op.body = [&a] {
    a.compute();
    a.x[3] += 1.0f;  // writes a tensor declared read-only
    return Status::ok();
  };
  const Status st = runOnce(*g, op);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_EQ(
      "guard: op 'affine' call 0 changed its input 'x': declare a tensor the op writes as state, so it is "
      "snapshotted",
      st.message());
  EXPECT_EQ(w, guard_test::bitsOf(a.w)) << "state restored";
  // Without the debug check the same op runs (the guard cannot see it).
  auto quiet = hostGuard(policyWith(GuardAction::kReplay));
  EXPECT_TRUE(runOnce(*quiet, op).isOk());
}

TEST(GuardPolicy, ValidationNamesTheField) {
  GuardPolicy p;
  EXPECT_TRUE(p.validate().isOk());
  p.replays = -1;
  EXPECT_EQ("guard policy: replays must be in [0, 1000], got -1", p.validate().message());
  p = GuardPolicy{};
  p.escalation = GuardAction::kReplay;
  EXPECT_EQ(StatusCode::kInvalidArgument, p.validate().code());
  p = GuardPolicy{};
  p.afterFallback = GuardAction::kFallback;
  EXPECT_EQ(StatusCode::kInvalidArgument, p.validate().code());
  p = GuardPolicy{};
  p.onDetect = GuardAction::kFallback;
  p.escalation = GuardAction::kFallback;
  EXPECT_EQ(StatusCode::kInvalidArgument, p.validate().code());
  p = GuardPolicy{};
  p.mode = VerdictMode::kDeferred;
  p.escalation = GuardAction::kClamp;
  EXPECT_EQ(
      "guard policy: 'clamp' needs immediate mode (deferred verdicts arrive after later ops consumed the "
      "values)",
      p.validate().message());
}

TEST(GuardPolicy, LadderIsFiniteAndEndsInATerminalAction) {
  using A = GuardAction;
  EXPECT_EQ((std::vector<A>{A::kReplay, A::kReplay, A::kRaise}), GuardPolicy{}.ladder());
  EXPECT_EQ((std::vector<A>{A::kReplay, A::kFallback, A::kSkipStep}), [] {
    GuardPolicy p = policyWith(A::kReplay, 1, A::kFallback);
    p.afterFallback = A::kSkipStep;
    return p.ladder();
  }());
  EXPECT_EQ((std::vector<A>{A::kFallback, A::kZero}), policyWith(A::kFallback, 5, A::kZero).ladder());
  EXPECT_EQ((std::vector<A>{A::kClamp}), policyWith(A::kClamp).ladder());
  EXPECT_EQ((std::vector<A>{A::kRaise}), policyWith(A::kReplay, 0).ladder());
}

TEST(GuardPolicy, NamesRoundTrip) {
  for (GuardAction a : {GuardAction::kReplay, GuardAction::kFallback, GuardAction::kZero, GuardAction::kClamp,
                        GuardAction::kSkipStep, GuardAction::kRaise}) {
    GuardAction back;
    ASSERT_TRUE(parseGuardAction(guardActionName(a), &back));
    EXPECT_EQ(a, back);
  }
  GuardAction a;
  EXPECT_FALSE(parseGuardAction("retry", &a));
  VerdictMode m;
  EXPECT_TRUE(parseVerdictMode("deferred", &m));
  EXPECT_EQ(VerdictMode::kDeferred, m);
  EXPECT_FALSE(parseVerdictMode("later", &m));
  FaultValue v;
  EXPECT_TRUE(parseFaultValue("-inf", &v));
  EXPECT_EQ(FaultValue::kNegInf, v);
  EXPECT_FALSE(parseFaultValue("zero", &v));
}

TEST(GuardFaultInjector, ProbabilityIsSeededAndReproducible) {
  auto draw = [](uint64_t seed) {
    GuardFaultInjector f;
    f.setSeed(seed);
    GuardFaultRule r;
    r.probability = 0.25;
    r.attempts = 2;
    EXPECT_TRUE(f.addRule(r).isOk());
    std::vector<uint64_t> hitCalls;
    for (uint64_t call = 0; call < 4000; ++call) {
      const auto first = f.hits("op", call, 0, 1);
      EXPECT_EQ(first.size(), f.hits("op", call, 1, 1).size()) << "a hit call stays hit for its attempts";
      EXPECT_TRUE(f.hits("op", call, 2, 1).empty());
      if (!first.empty()) hitCalls.push_back(call);
    }
    return hitCalls;
  };
  const auto a = draw(7), b = draw(7), c = draw(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // 4000 draws at p = 0.25: 1000 expected, sd ~27; 6 sd either side.
  EXPECT_GT(a.size(), 840u);
  EXPECT_LT(a.size(), 1160u);
}

TEST(GuardFaultInjector, OutputSelection) {
  GuardFaultInjector f;
  EXPECT_FALSE(f.enabled());
  GuardFaultRule r = rule("op", 2);
  r.output = -1;
  EXPECT_TRUE(f.addRule(r).isOk());
  EXPECT_TRUE(f.enabled());
  EXPECT_EQ(3u, f.hits("op", 2, 0, 3).size());
  EXPECT_TRUE(f.hits("op", 1, 0, 3).empty());
  EXPECT_TRUE(f.hits("other", 2, 0, 3).empty());
  f.clear();
  EXPECT_TRUE(f.hits("op", 2, 0, 3).empty());
}

// Each dtype: every fault value written, found (or, for the large finite one, not found), and sanitized to
// the exact bits.
struct DtypeCase {
  DataType dtype;
  uint64_t nan, posInf, negInf, maxFinite;
};

TEST(GuardHostBackend, ScanInjectAndSanitizeEveryFloatType) {
  const DtypeCase cases[] = {
      {DataType::kFloat32, 0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu},
      {DataType::kFloat64, 0x7ff8000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
       0x7fefffffffffffffull},
      {DataType::kFloat16, 0x7e00u, 0x7c00u, 0xfc00u, 0x7bffu},
      {DataType::kBFloat16, 0x7fc0u, 0x7f80u, 0xff80u, 0x7f7fu},
  };
  auto backend = makeHostGuardBackend();
  for (const DtypeCase& c : cases) {
    SCOPED_TRACE(dataTypeName(c.dtype));
    const size_t width = dataTypeSize(c.dtype);
    const size_t n = 19;
    std::vector<unsigned char> mem(n * width, 0);  // all +0
    GuardBuffer b{"t", mem.data(), mem.size(), c.dtype, MemoryKind::kHost};
    auto bitsAt = [&](size_t i) {
      uint64_t v = 0;
      std::memcpy(&v, mem.data() + i * width, width);
      return v;
    };
    ASSERT_TRUE(backend->inject(b, 3, FaultValue::kNaN, nullptr).isOk());
    ASSERT_TRUE(backend->inject(b, 5, FaultValue::kPosInf, nullptr).isOk());
    ASSERT_TRUE(backend->inject(b, 7, FaultValue::kNegInf, nullptr).isOk());
    ASSERT_TRUE(backend->inject(b, 9, FaultValue::kLargeFinite, nullptr).isOk());
    EXPECT_EQ(c.nan, bitsAt(3));
    EXPECT_EQ(c.posInf, bitsAt(5));
    EXPECT_EQ(c.negInf, bitsAt(7));
    EXPECT_EQ(c.maxFinite, bitsAt(9));
    std::vector<ScanResult> results;
    ASSERT_TRUE(backend->scan(b, nullptr).isOk());
    ASSERT_TRUE(backend->readScans(nullptr, &results).isOk());
    ASSERT_EQ(1u, results.size());
    EXPECT_EQ(3u, results[0].count);
    EXPECT_EQ(3u, results[0].firstIndex);
    double v = 0;
    ASSERT_TRUE(backend->readElement(b, 7, nullptr, &v).isOk());
    EXPECT_EQ(-INFINITY, v);

    std::vector<unsigned char> copy = mem;
    GuardBuffer cb{"c", copy.data(), copy.size(), c.dtype, MemoryKind::kHost};
    ASSERT_TRUE(backend->sanitize(b, SanitizeMode::kZero, nullptr).isOk());
    EXPECT_EQ(0u, bitsAt(3));
    EXPECT_EQ(0u, bitsAt(5));
    EXPECT_EQ(0u, bitsAt(7));
    EXPECT_EQ(c.maxFinite, bitsAt(9));
    ASSERT_TRUE(backend->sanitize(cb, SanitizeMode::kClamp, nullptr).isOk());
    mem = copy;
    EXPECT_EQ(0u, bitsAt(3));
    EXPECT_EQ(c.maxFinite, bitsAt(5));
    EXPECT_EQ(c.negInf - c.posInf + c.maxFinite, bitsAt(7)) << "the lowest finite value: sign | max";
  }
}

TEST(GuardHostBackend, IntegerBuffersScanCleanAndRefuseInjection) {
  auto backend = makeHostGuardBackend();
  std::vector<int32_t> v(5, -1);  // all bits set: "non-finite" if it were read as a float
  GuardBuffer b{"i", v.data(), v.size() * 4, DataType::kInt32, MemoryKind::kHost};
  std::vector<ScanResult> r;
  ASSERT_TRUE(backend->scan(b, nullptr).isOk());
  ASSERT_TRUE(backend->readScans(nullptr, &r).isOk());
  EXPECT_TRUE(r.at(0).clean());
  EXPECT_EQ("guard: cannot inject a non-finite value into integer buffer 'i'",
            backend->inject(b, 0, FaultValue::kNaN, nullptr).message());
}

}  // namespace
}  // namespace ringguard
