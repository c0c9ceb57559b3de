// The CUDA layer's host planning (src/cuda/apply_plan.h), without a GPU: which launch a task of the device
// executor takes and with which arguments, the launchers' argument checks, and the vector plan of the data
// path (widest common alignment, head, vectors, tail) for every element size and pointer misalignment.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/reduce.h"
#include "cuda/apply_plan.h"
#include "cuda/verify_reduce.h"
#include "executor/device/device_apply_plan.h"
#include "executor/executor.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace {

// Fake addresses: the plan only does arithmetic on them.
void* address(uintptr_t a) { return reinterpret_cast<void*>(a); }
constexpr uintptr_t kDst = 0x10000, kLocal = 0x20000, kSlot = 0x30000;

// The plan's invariants for `count` elements of `e` bytes at the given offsets (local: none when null).
void expectValidPlan(const ApplyParams& p, uintptr_t d, const uintptr_t* l, uintptr_t s, size_t count,
                     size_t e) {
  const size_t v = size_t(p.vecBytes);
  const std::string where = "elem " + std::to_string(e) + " count " + std::to_string(count) + " offsets " +
                            std::to_string(d % 16) + "/" + (l ? std::to_string(*l % 16) : "-") + "/" +
                            std::to_string(s % 16) + " vec " + std::to_string(v);
  ASSERT_TRUE(v == e || v == 4 || v == 8 || v == 16) << where;
  ASSERT_GE(v, e) << where;
  const auto equallyAligned = [&](size_t w) { return d % w == s % w && (l == nullptr || d % w == *l % w); };
  // The widest vector the pointers allow, never one of two bytes.
  for (size_t w : {16, 8, 4}) {
    if (w > v && w > e)
      EXPECT_FALSE(equallyAligned(w)) << where << ": " << w << "-byte vectors were possible";
  }
  if (v == e) {
    EXPECT_EQ(p.head, 0u) << where;
    EXPECT_EQ(p.vectors, count) << where;
    return;
  }
  EXPECT_TRUE(equallyAligned(v)) << where;
  const uint64_t per = v / e;
  ASSERT_LE(p.head + p.vectors * per, count) << where;
  if (p.head < count) EXPECT_EQ((d + p.head * e) % v, 0u) << where << ": the vectors start aligned";
  EXPECT_LT(p.head, per) << where;
  EXPECT_LT(count - p.head - p.vectors * per, per) << where << ": the tail is less than a vector";
}

TEST(ApplyPlanTest, VectorsAreTheWidestCommonAlignmentWithHeadAndTail) {
  for (size_t e : {1, 2, 4, 8}) {
    for (uintptr_t od = 0; od < 16; od += e) {
      for (uintptr_t ol = 0; ol < 16; ol += e) {
        for (uintptr_t os = 0; os < 16; os += e) {
          for (size_t count : {0, 1, 3, 17, 64, 1001}) {
            const uintptr_t d = kDst + od, l = kLocal + ol, s = kSlot + os;
            const ApplyParams p = planVectors(address(d), address(l), address(s), count, e, {3, 0.5});
            ASSERT_NO_FATAL_FAILURE(expectValidPlan(p, d, &l, s, count, e));
            EXPECT_EQ(p.count, count);
            EXPECT_EQ(p.arg.nranks, 3);
            EXPECT_EQ(p.arg.scalar, 0.5);
            // A copy has no local operand: only dst and slot decide.
            const ApplyParams c = planVectors(address(d), nullptr, address(s), count, e, {1, 1});
            ASSERT_NO_FATAL_FAILURE(expectValidPlan(c, d, nullptr, s, count, e));
            EXPECT_EQ(c.local, nullptr);
          }
        }
      }
    }
  }
  // Equally aligned 256-byte slots (the executor's) always get 16-byte vectors and no head.
  const ApplyParams p = planVectors(address(kDst), address(kLocal), address(kSlot), 1000, 4, {1, 1});
  EXPECT_EQ(p.vecBytes, 16);
  EXPECT_EQ(p.head, 0u);
  EXPECT_EQ(p.vectors, 250u);
}

DeviceApply deviceApply(DataType dtype, ReduceOp op, bool reduce, uintptr_t od = 0, uintptr_t ol = 0,
                        uintptr_t os = 0) {
  DeviceApply a;
  a.slotTrailer = static_cast<const Trailer*>(address(0x40000));
  a.payloadCrc = static_cast<const uint32_t*>(address(0x50000));
  a.dst = address(kDst + od);
  a.local = reduce ? address(kLocal + ol) : nullptr;
  a.slot = address(kSlot + os);
  a.count = 100;
  a.dtype = dtype;
  a.op = op;
  a.reduce = reduce;
  a.nranks = 4;
  return a;
}

TEST(ApplyPlanTest, ReductionsRunOnTheirOperationsElementsAndCopiesOnBytes) {
  // f32 sum: elements of 4 bytes.
  ApplyParams p = planApply(deviceApply(DataType::kFloat32, ReduceOp::kSum, true));
  EXPECT_EQ(p.count, 100u);
  EXPECT_EQ(p.vectors, 25u);
  EXPECT_EQ(p.arg.nranks, 4);
  // Complex: the parts; bitwise: bytes; a copy: bytes, whatever the dtype.
  p = planApply(deviceApply(DataType::kComplex128, ReduceOp::kSum, true));
  EXPECT_EQ(p.count, 200u);
  EXPECT_EQ(p.vectors, 100u);
  p = planApply(deviceApply(DataType::kInt64, ReduceOp::kBxor, true));
  EXPECT_EQ(p.count, 800u);
  EXPECT_EQ(p.vectors, 50u);
  p = planApply(deviceApply(DataType::kFloat64, ReduceOp::kSum, false, 0, 0, 8));  // slot 8 bytes off
  EXPECT_EQ(p.count, 800u);
  EXPECT_EQ(p.vecBytes, 8);
  EXPECT_EQ(p.local, nullptr);
  // premul_sum's factor as the element type holds it.
  ReduceOp tenth = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.1, &tenth).isOk());
  p = planApply(deviceApply(DataType::kFloat16, tenth, true));
  EXPECT_EQ(p.arg.scalar, premulScalar(DataType::kFloat16, 0.1));
  EXPECT_NE(p.arg.scalar, 0.1);
  // reduceDevice's plan is the same as a reduction's.
  const ApplyParams r = planReduce(DataType::kComplex64, ReduceOp::kAvg, address(kDst), address(kLocal + 4),
                                   address(kSlot + 4), 10, 3);
  EXPECT_EQ(r.count, 20u);
  EXPECT_EQ(r.vecBytes, 4);
  EXPECT_EQ(r.arg.nranks, 3);
}

TEST(ApplyPlanTest, TheFusedCrcNeedsSixteenByteVectors) {
  EXPECT_TRUE(verifyApplyCrcFuses(deviceApply(DataType::kFloat32, ReduceOp::kSum, true)));
  EXPECT_TRUE(verifyApplyCrcFuses(deviceApply(DataType::kFloat32, ReduceOp::kSum, true, 4, 4, 4)));
  EXPECT_FALSE(verifyApplyCrcFuses(deviceApply(DataType::kFloat32, ReduceOp::kSum, true, 0, 8, 0)));
  EXPECT_FALSE(verifyApplyCrcFuses(deviceApply(DataType::kUint8, ReduceOp::kSum, false, 1, 0, 0)));
  EXPECT_TRUE(verifyApplyCrcFuses(deviceApply(DataType::kUint8, ReduceOp::kSum, false, 3, 0, 3)));
}

TEST(ApplyPlanTest, ArgumentChecksNameWhatIsWrong) {
  const auto message = [](const Status& s) { return s.isOk() ? std::string("ok") : s.message(); };
  const DeviceApply good = deviceApply(DataType::kFloat32, ReduceOp::kSum, true);
  EXPECT_TRUE(checkDeviceApply("f", good).isOk());
  DeviceApply a = good;
  a.slotTrailer = nullptr;
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: null trailer or payload CRC pointer");
  a = good;
  a.dtype = static_cast<DataType>(99);
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: invalid dtype");
  a = good;
  a.op = static_cast<ReduceOp>(99);
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: invalid op");
  a = good;
  a.op = ReduceOp::kBand;
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: op band does not reduce dtype f32");
  a = good;
  a.nranks = 0;
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: nranks must be >= 1, got 0");
  a = good;
  a.count = ~size_t(0) / 2;
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: element count overflows");
  a = good;
  a.local = nullptr;
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: null buffer");
  a.count = 0;  // nothing to touch: null operands are fine
  EXPECT_TRUE(checkDeviceApply("f", a).isOk());
  a = good;
  a.dst = address(kDst + 2);
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: buffers must be aligned to their element size (4 bytes)");
  // Complex reduces its parts, so part alignment is enough; a copy moves whole elements.
  a = deviceApply(DataType::kComplex128, ReduceOp::kSum, true, 8, 8, 8);
  EXPECT_TRUE(checkDeviceApply("f", a).isOk());
  a.reduce = false;
  EXPECT_EQ(message(checkDeviceApply("f", a)), "f: buffers must be aligned to their element size (16 bytes)");
  // A copy needs no local operand, nor an op that reduces its dtype.
  a = deviceApply(DataType::kFloat8E4M3, ReduceOp::kSum, false);
  EXPECT_TRUE(checkDeviceApply("f", a).isOk());
}

ApplyTask task(bool reduce, bool inPlace, bool forwarded) {
  ApplyTask t;
  t.expected.seq = 11;
  t.expected.step = 2;
  t.expected.slice = 3;
  t.expected.payloadBytes = 4 * 70;
  t.next.seq = 11;
  t.next.step = 3;
  t.next.slice = 3;
  t.next.payloadBytes = 4 * 70;
  t.dst = address(0x60000);
  t.local = reduce ? address(0x70000) : nullptr;
  t.count = 70;
  t.dtype = DataType::kInt32;
  t.op = ReduceOp::kMax;
  t.reduce = reduce;
  t.inPlace = inPlace;
  t.finalStep = true;
  t.forwarded = forwarded;
  t.nranks = 5;
  return t;
}

ApplySlot slotMemory(bool forwarded) {
  ApplySlot s;
  s.trailer = static_cast<const Trailer*>(address(0x80000));
  s.payload = address(0x90000);
  s.payloadCrc = static_cast<uint32_t*>(address(0xA0000));
  s.verdictByte = static_cast<uint8_t*>(address(0xB0000));
  s.verdictWord = static_cast<uint32_t*>(address(0xC0000));
  s.nextTrailer = forwarded ? static_cast<Trailer*>(address(0xD0000)) : nullptr;
  return s;
}

bool sameId(const SliceId& a, const SliceId& b) {
  return a.seq == b.seq && a.step == b.step && a.slice == b.slice && a.column == b.column &&
         a.payloadBytes == b.payloadBytes && a.attempt == b.attempt;
}

TEST(ApplyPlanTest, EachTaskKindTakesItsLaunchWithEveryFieldOfTheTask) {
  struct Case {
    bool reduce, inPlace, forwarded;
    ApplyLaunch launch;
  };
  const Case cases[] = {
      {true, false, false, ApplyLaunch::kApply},         {false, false, false, ApplyLaunch::kApply},
      {true, false, true, ApplyLaunch::kApplyCrc},       {false, false, true, ApplyLaunch::kCopyCrc},
      {false, true, false, ApplyLaunch::kVerifyInPlace}, {false, true, true, ApplyLaunch::kVerifyInPlace},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("reduce ") + (c.reduce ? "1" : "0") + " inPlace " + (c.inPlace ? "1" : "0") +
                 " forwarded " + (c.forwarded ? "1" : "0"));
    const ApplyTask t = task(c.reduce, c.inPlace, c.forwarded);
    const ApplySlot s = slotMemory(c.forwarded);
    const DeviceApplyPlan plan = planDeviceApply(t, s);
    EXPECT_EQ(plan.launch, c.launch);
    EXPECT_EQ(plan.bytes, 280u);
    if (c.inPlace) {
      // The CRC is of dst where it lies; the verify kernel seals the forwarded trailer itself.
      EXPECT_EQ(plan.received, t.dst);
      EXPECT_FALSE(plan.sealsNext);
      const DeviceVerify& v = plan.verify;
      EXPECT_EQ(v.slotTrailer, s.trailer);
      EXPECT_EQ(v.payloadCrc, s.payloadCrc);
      EXPECT_TRUE(sameId(v.expected, t.expected));
      EXPECT_EQ(v.verdictByte, s.verdictByte);
      EXPECT_EQ(v.verdictWord, s.verdictWord);
      EXPECT_TRUE(sameId(v.next, t.next));
      EXPECT_EQ(v.sealOut, c.forwarded ? s.nextTrailer : nullptr);
      continue;
    }
    EXPECT_EQ(plan.received, s.payload);
    EXPECT_EQ(plan.sealsNext, c.forwarded);
    const DeviceApply& a = plan.apply;
    EXPECT_EQ(a.slotTrailer, s.trailer);
    EXPECT_EQ(a.payloadCrc, s.payloadCrc);
    EXPECT_TRUE(sameId(a.expected, t.expected));
    EXPECT_EQ(a.verdictByte, s.verdictByte);
    EXPECT_EQ(a.verdictWord, s.verdictWord);
    EXPECT_EQ(a.dst, t.dst);
    EXPECT_EQ(a.local, t.local);
    EXPECT_EQ(a.slot, s.payload);
    EXPECT_EQ(a.count, t.count);
    EXPECT_EQ(a.dtype, t.dtype);
    EXPECT_EQ(a.op, t.op);
    EXPECT_EQ(a.reduce, t.reduce);
    EXPECT_EQ(a.finalStep, t.finalStep);
    EXPECT_EQ(a.nranks, t.nranks);
    EXPECT_FALSE(firstStepOf(a));
    EXPECT_TRUE(checkDeviceApply("plan", a).isOk());
  }
  // Step 0's slot holds the sender's input: premul_sum scales it too.
  ApplyTask first = task(true, false, true);
  first.expected.step = 0;
  EXPECT_TRUE(firstStepOf(planDeviceApply(first, slotMemory(true)).apply));
}

}  // namespace
}  // namespace ringguard
