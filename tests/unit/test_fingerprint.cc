// The collective fingerprint (docs/design/protocol.md, "Fingerprint"): ranks that call different
// collectives get a kFingerprintMismatch naming both sides before any payload moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/fingerprint.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FingerprintTest, WireLayout) {
  EXPECT_EQ(sizeof(Fingerprint), 32u);
  const Fingerprint f = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3);
  EXPECT_EQ(std::memcmp(&f, "RFP1", 4), 0);
}

TEST(FingerprintTest, MakeAllreduceFillsFields) {
  const Fingerprint f = makeAllreduceFingerprint(ReduceOp::kMax, DataType::kBFloat16, 0x123456789ull, 77);
  EXPECT_EQ(f.magic, kFingerprintMagic);
  EXPECT_EQ(f.collective, 0u);
  EXPECT_EQ(f.op, static_cast<uint8_t>(ReduceOp::kMax));
  EXPECT_EQ(f.dtype, static_cast<uint8_t>(DataType::kBFloat16));
  EXPECT_EQ(f.flags, 0u);
  EXPECT_EQ(f.count, 0x123456789ull);
  EXPECT_EQ(f.seq, 77u);
}

TEST(FingerprintTest, DescribeExact) {
  EXPECT_EQ(describeFingerprint(makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3)),
            "{allreduce op=sum dtype=f32 count=100 seq=3}");
  EXPECT_EQ(describeFingerprint(makeAllreduceFingerprint(ReduceOp::kAvg, DataType::kUint8, 0, 0)),
            "{allreduce op=avg dtype=u8 count=0 seq=0}");
  for (ReduceOp op : kAllReduceOps) {
    for (DataType dt : kAllDataTypes) {
      const std::string d = describeFingerprint(makeAllreduceFingerprint(op, dt, 5, 6));
      EXPECT_EQ(d, std::string("{allreduce op=") + reduceOpName(op) + " dtype=" + dataTypeName(dt) +
                       " count=5 seq=6}");
    }
  }
  Fingerprint invalid = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 1, 2);
  invalid.flags = kFingerprintInvalidInput;
  EXPECT_EQ(describeFingerprint(invalid), "{allreduce op=sum dtype=f32 count=1 seq=2 invalid-arguments}");
}

TEST(FingerprintTest, PremulSumCarriesItsFactor) {
  ReduceOp half = ReduceOp::kSum, quarter = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  ASSERT_TRUE(makePremulSum(0.25, &quarter).isOk());
  const Fingerprint a =
      makeFingerprint(CollectiveKind::kReduceScatter, half, DataType::kBFloat16, 8, kNoRoot, 1);
  const Fingerprint b =
      makeFingerprint(CollectiveKind::kReduceScatter, quarter, DataType::kBFloat16, 8, kNoRoot, 1);
  // The wire carries the kind and the factor, never the process-local handle.
  EXPECT_EQ(a.op, static_cast<uint8_t>(ReduceOp::kPremulSum));
  EXPECT_EQ(describeFingerprint(a), "{reduce_scatter op=premul_sum(0.5) dtype=bf16 count=8 seq=1}");
  const Status s = compareFingerprints(0, a, 1, b);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_EQ(
      s.message(),
      "collective fingerprint mismatch: rank 0 has {reduce_scatter op=premul_sum(0.5) dtype=bf16 count=8 "
      "seq=1}, rank 1 has {reduce_scatter op=premul_sum(0.25) dtype=bf16 count=8 seq=1}");
  // premul_sum against sum: a mismatch too.
  const Fingerprint c =
      makeFingerprint(CollectiveKind::kReduceScatter, ReduceOp::kSum, DataType::kBFloat16, 8, kNoRoot, 1);
  EXPECT_EQ(compareFingerprints(0, a, 1, c).code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(compareFingerprints(0, a, 1, a).isOk());
}

TEST(FingerprintTest, EqualFingerprintsCompareOk) {
  const Fingerprint a = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3);
  const Fingerprint b = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3);
  const Status s = compareFingerprints(0, a, 2, b);
  EXPECT_TRUE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_TRUE(compareFingerprints(5, a, 5, a).isOk());
}

struct MismatchCase {
  const char* name;
  Fingerprint other;
  const char* otherText;
};

TEST(FingerprintTest, EveryDifferingFieldIsAMismatchNamingBothSides) {
  const Fingerprint mine = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3);
  const std::string mineText = "{allreduce op=sum dtype=f32 count=100 seq=3}";
  const MismatchCase cases[] = {
      {"op", makeAllreduceFingerprint(ReduceOp::kMax, DataType::kFloat32, 100, 3),
       "{allreduce op=max dtype=f32 count=100 seq=3}"},
      {"dtype", makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat16, 100, 3),
       "{allreduce op=sum dtype=f16 count=100 seq=3}"},
      {"count", makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 99, 3),
       "{allreduce op=sum dtype=f32 count=99 seq=3}"},
      {"seq", makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 4),
       "{allreduce op=sum dtype=f32 count=100 seq=4}"},
  };
  for (const MismatchCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Status s = compareFingerprints(0, mine, 2, c.other);
    EXPECT_FALSE(s.isOk());
    EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
    EXPECT_TRUE(contains(s.message(), "rank 0 has " + mineText)) << s.message();
    EXPECT_TRUE(contains(s.message(), std::string("rank 2 has ") + c.otherText)) << s.message();
    EXPECT_EQ(s.message(),
              "collective fingerprint mismatch: rank 0 has " + mineText + ", rank 2 has " + c.otherText);
    // Symmetric: the other rank reports the same pair the other way round.
    const Status r = compareFingerprints(2, c.other, 0, mine);
    EXPECT_EQ(r.code(), StatusCode::kFingerprintMismatch);
    EXPECT_TRUE(contains(r.message(), std::string("rank 2 has ") + c.otherText)) << r.message();
    EXPECT_TRUE(contains(r.message(), "rank 0 has " + mineText)) << r.message();
  }
}

TEST(FingerprintTest, FlagsAndCollectiveDifferencesAreMismatches) {
  const Fingerprint mine = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3);
  Fingerprint invalid = mine;
  invalid.flags = kFingerprintInvalidInput;
  Status s = compareFingerprints(1, mine, 3, invalid);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(
      contains(s.message(), "rank 3 has {allreduce op=sum dtype=f32 count=100 seq=3 invalid-arguments}"))
      << s.message();

  // Another collective is named; a kind byte no collective has is "collective?".
  Fingerprint other = mine;
  other.collective = uint8_t(CollectiveKind::kReduceScatter);
  s = compareFingerprints(1, mine, 3, other);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(contains(s.message(), "rank 3 has {reduce_scatter op=sum dtype=f32 count=100 seq=3}"))
      << s.message();
  other.collective = 200;
  s = compareFingerprints(1, mine, 3, other);
  EXPECT_TRUE(contains(s.message(), "rank 3 has {collective? dtype=f32")) << s.message();

  // Broadcast's root is part of it, and named.
  const Fingerprint b0 =
      makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, DataType::kInt32, 8, 0, 2);
  const Fingerprint b1 =
      makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, DataType::kInt32, 8, 1, 2);
  s = compareFingerprints(0, b0, 2, b1);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(contains(s.message(),
                       "rank 0 has {broadcast dtype=i32 count=8 root=0 seq=2}, rank 2 has "
                       "{broadcast dtype=i32 count=8 root=1 seq=2}"))
      << s.message();
}

TEST(FingerprintTest, InvalidOpOrDtypeByteIsDescribedAsInvalid) {
  Fingerprint f = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 8, 1);
  f.op = 9;  // one past kPremulSum (premul_sum handles never go on the wire)
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=invalid dtype=f32 count=8 seq=1}");
  f.op = 0xFF;
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=invalid dtype=f32 count=8 seq=1}");
  f.op = static_cast<uint8_t>(ReduceOp::kProd);
  f.dtype = 14;  // one past kComplex128
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=prod dtype=invalid count=8 seq=1}");
  f.dtype = 200;
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=prod dtype=invalid count=8 seq=1}");

  const Status s =
      compareFingerprints(0, makeAllreduceFingerprint(ReduceOp::kProd, DataType::kFloat32, 8, 1), 1, f);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(contains(s.message(), "rank 1 has {allreduce op=prod dtype=invalid count=8 seq=1}"))
      << s.message();
}

TEST(FingerprintTest, BadMagicIsMalformed) {
  const Fingerprint mine = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, 3);
  Fingerprint bad = mine;
  bad.magic = 0;
  EXPECT_EQ(describeFingerprint(bad), "{malformed fingerprint}");
  bad.magic = kFingerprintMagic ^ 0x100;
  EXPECT_EQ(describeFingerprint(bad), "{malformed fingerprint}");
  const Status s = compareFingerprints(0, mine, 4, bad);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_EQ(
      s.message(),
      "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=f32 count=100 seq=3}, rank 4 has "
      "{malformed fingerprint}");
  // Two malformed fingerprints with different bytes are still a mismatch.
  Fingerprint bad2 = bad;
  bad2.count = 1;
  EXPECT_EQ(compareFingerprints(0, bad, 1, bad2).code(), StatusCode::kFingerprintMismatch);
}

}  // namespace
}  // namespace ringguard
