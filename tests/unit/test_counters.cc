// Integrity and traffic counters: accumulation and the printed form.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "ringguard/core/counters.h"

namespace ringguard {
namespace {

// Seventeen uint64_t fields. If a field is added, this fails so that the tests below get extended with it.
static_assert(sizeof(Counters) == 17 * sizeof(uint64_t), "update test_counters.cc for the new field");

Counters distinct(uint64_t base) {
  Counters c;
  c.collectives = base + 1;
  c.bytesSent = base + 2;
  c.slicesSent = base + 3;
  c.slicesVerified = base + 4;
  c.injected = base + 5;
  c.detected = base + 6;
  c.retransmitted = base + 7;
  c.escaped = base + 8;
  c.delayed = base + 9;
  c.repairRounds = base + 10;
  c.transferWaitNs = (base + 11) * 1000000;
  c.applyNs = (base + 12) * 1000000;
  c.executorWaitNs = (base + 13) * 1000000;
  c.controlFrames = base + 14;
  c.controlBytes = base + 15;
  c.nonFiniteInputs = base + 16;
  c.skipped = base + 17;
  return c;
}

TEST(CountersTest, DefaultIsAllZero) {
  const Counters c;
  EXPECT_EQ(c.collectives, 0u);
  EXPECT_EQ(c.bytesSent, 0u);
  EXPECT_EQ(c.slicesSent, 0u);
  EXPECT_EQ(c.slicesVerified, 0u);
  EXPECT_EQ(c.injected, 0u);
  EXPECT_EQ(c.detected, 0u);
  EXPECT_EQ(c.retransmitted, 0u);
  EXPECT_EQ(c.escaped, 0u);
  EXPECT_EQ(c.delayed, 0u);
  EXPECT_EQ(c.repairRounds, 0u);
  EXPECT_EQ(c.controlFrames, 0u);
  EXPECT_EQ(c.controlBytes, 0u);
  EXPECT_EQ(c.nonFiniteInputs, 0u);
  EXPECT_EQ(c.skipped, 0u);
}

TEST(CountersTest, PlusEqualsAddsEveryField) {
  Counters a = distinct(0);          // 1..10
  const Counters b = distinct(100);  // 101..110
  Counters& r = (a += b);
  EXPECT_EQ(&r, &a);
  EXPECT_EQ(a.collectives, 1u + 101u);
  EXPECT_EQ(a.bytesSent, 2u + 102u);
  EXPECT_EQ(a.slicesSent, 3u + 103u);
  EXPECT_EQ(a.slicesVerified, 4u + 104u);
  EXPECT_EQ(a.injected, 5u + 105u);
  EXPECT_EQ(a.detected, 6u + 106u);
  EXPECT_EQ(a.retransmitted, 7u + 107u);
  EXPECT_EQ(a.escaped, 8u + 108u);
  EXPECT_EQ(a.delayed, 9u + 109u);
  EXPECT_EQ(a.repairRounds, 10u + 110u);
  EXPECT_EQ(a.transferWaitNs, (11u + 111u) * 1000000);
  EXPECT_EQ(a.applyNs, (12u + 112u) * 1000000);
  EXPECT_EQ(a.executorWaitNs, (13u + 113u) * 1000000);
  EXPECT_EQ(a.controlFrames, 14u + 114u);
  EXPECT_EQ(a.controlBytes, 15u + 115u);
  EXPECT_EQ(a.nonFiniteInputs, 16u + 116u);
  EXPECT_EQ(a.skipped, 17u + 117u);
  // The right-hand side is untouched.
  EXPECT_EQ(b.collectives, 101u);
  EXPECT_EQ(b.repairRounds, 110u);

  // Adding zero changes nothing; large values are not truncated.
  Counters big = distinct(uint64_t(1) << 40);
  big += Counters{};
  EXPECT_EQ(big.bytesSent, (uint64_t(1) << 40) + 2);
  EXPECT_EQ(big.repairRounds, (uint64_t(1) << 40) + 10);
}

TEST(CountersTest, SinceSubtractsEveryField) {
  Counters a = distinct(0), b = distinct(100);
  Counters sum = a;
  sum += b;
  const Counters d = sum.since(a);
  EXPECT_EQ(d.toString(), b.toString());
  EXPECT_EQ(sum.since(sum).toString(), Counters{}.toString());
}

TEST(CountersTest, ToStringNamesEveryField) {
  const std::string s = distinct(100).toString();
  EXPECT_EQ(
      s,
      "collectives=101 bytes_sent=102 slices_sent=103 slices_verified=104 injected=105 detected=106 "
      "retransmitted=107 escaped=108 delayed=109 repair_rounds=110 control_frames=114 control_bytes=115 "
      "non_finite_inputs=116 skipped=117 transfer_wait_ms=111 apply_ms=112 executor_wait_ms=113");
  for (const char* field :
       {"collectives=101", "bytes_sent=102", "slices_sent=103", "slices_verified=104", "injected=105",
        "detected=106", "retransmitted=107", "escaped=108", "delayed=109", "repair_rounds=110",
        "control_frames=114", "control_bytes=115", "non_finite_inputs=116", "skipped=117"}) {
    EXPECT_NE(s.find(field), std::string::npos) << field << " missing in: " << s;
  }
  EXPECT_EQ(
      Counters{}.toString(),
      "collectives=0 bytes_sent=0 slices_sent=0 slices_verified=0 injected=0 detected=0 retransmitted=0 "
      "escaped=0 delayed=0 repair_rounds=0 control_frames=0 control_bytes=0 non_finite_inputs=0 skipped=0 "
      "transfer_wait_ms=0 apply_ms=0 "
      "executor_wait_ms=0");
}

}  // namespace
}  // namespace ringguard
