// The collective fingerprint (docs/design/protocol.md, "Fingerprint"): ranks that call different
// collectives get a kFingerprintMismatch naming both sides before any payload moves.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/fingerprint.h"
#include "ringguard/core/issue_lane.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "runtime/handshake.h"

namespace ringguard {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FingerprintTest, WireLayout) {
  EXPECT_EQ(sizeof(Fingerprint), 40u);
  const Fingerprint f =
      makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3, 0xA1B2C3D4u, 7});
  EXPECT_EQ(std::memcmp(&f, "RFP1", 4), 0);
  // The lane and its number follow the 32 bytes of protocol version 3, little-endian.
  const auto* bytes = reinterpret_cast<const uint8_t*>(&f);
  EXPECT_EQ(offsetof(Fingerprint, lane), 32u);
  EXPECT_EQ(offsetof(Fingerprint, laneSeq), 36u);
  const uint8_t lane[] = {0xD4, 0xC3, 0xB2, 0xA1, 7, 0, 0, 0};
  EXPECT_EQ(std::memcmp(bytes + 32, lane, sizeof lane), 0);
}

// Ranks of two builds meet the handshake's version check ("ringguard protocol version differs") before any
// fingerprint, as long as a new fingerprint layout comes with a higher kProtocolVersion. The 40-byte layout
// (issue lanes) came with version 4 and is unchanged in versions 5 (small collectives' payloads in the
// fingerprint frame), 6 (small send/recv payloads in the fingerprint message) and 7 (point-to-point
// handshake): a new layout fails this test until the version is raised and the new pair recorded here.
TEST(FingerprintTest, WireFormatIsPinnedToTheProtocolVersion) {
  EXPECT_EQ(sizeof(Fingerprint), 40u)
      << "a new fingerprint layout needs a kProtocolVersion bump (runtime/handshake.h); record the pair";
  EXPECT_EQ(kProtocolVersion, 7u);
}

TEST(FingerprintTest, MakeFingerprintCarriesTheIssueOrder) {
  const Fingerprint f = makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, DataType::kInt32, 8, 2,
                                        IssueOrder{5, 0x0BADF00Du, 9});
  EXPECT_EQ(f.seq, 5u);
  EXPECT_EQ(f.lane, 0x0BADF00Du);
  EXPECT_EQ(f.laneSeq, 9u);
  const Fingerprint none =
      makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, DataType::kInt32, 8, 2, IssueOrder{5});
  EXPECT_EQ(none.lane, kNoIssueLane);
  EXPECT_EQ(none.laneSeq, 0u);
}

// Defect 8: the same collective issued from two lanes is a mismatch naming both lanes by name (lanes this
// process entered) and number, with the reason; a lane only another process entered is named by its id.
TEST(FingerprintTest, DifferentIssueLanesAreAMismatchNamingBoth) {
  const uint32_t prefetch = IssueLane("fp-prefetch").id(), main = IssueLane("fp-main").id();
  const Fingerprint a =
      makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3, prefetch, 1});
  const Fingerprint b =
      makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3, main, 2});
  EXPECT_EQ(describeFingerprint(a), "{allreduce op=sum dtype=f32 count=100 seq=3 lane 'fp-prefetch' #1}");
  const std::string reason =
      " (the same collective from different issue lanes: threads issued same-shape collectives in a "
      "different "
      "order on these ranks)";
  Status s = compareFingerprints(0, a, 1, b);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_EQ(s.message(),
            "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=f32 count=100 seq=3 lane "
            "'fp-prefetch' #1}, rank 1 has {allreduce op=sum dtype=f32 count=100 seq=3 lane 'fp-main' #2}" +
                reason);
  // The lane's number alone differs: still the threads' order.
  Fingerprint c = a;
  c.laneSeq = 2;
  s = compareFingerprints(0, a, 1, c);
  EXPECT_EQ(
      s.message(),
      "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=f32 count=100 seq=3 lane "
      "'fp-prefetch' #1}, rank 1 has {allreduce op=sum dtype=f32 count=100 seq=3 lane 'fp-prefetch' #2} "
      "(the same collective at different positions of one issue lane: threads issued same-shape "
      "collectives in a different order on these ranks)");
  // A lane against none.
  const Fingerprint plain = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3});
  s = compareFingerprints(1, plain, 0, a);
  EXPECT_EQ(
      s.message(),
      "collective fingerprint mismatch: rank 1 has {allreduce op=sum dtype=f32 count=100 seq=3}, rank 0 "
      "has {allreduce op=sum dtype=f32 count=100 seq=3 lane 'fp-prefetch' #1}" +
          reason);
  // Another difference besides the lane: no claim about the order.
  const Fingerprint d =
      makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 99, IssueOrder{3, main, 1});
  s = compareFingerprints(0, a, 1, d);
  EXPECT_EQ(s.message(),
            "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=f32 count=100 seq=3 lane "
            "'fp-prefetch' #1}, rank 1 has {allreduce op=sum dtype=f32 count=99 seq=3 lane 'fp-main' #1}");
  // Never entered here: its id, the CRC-32 of its name (crc32("123456789") = 0xcbf43926).
  const Fingerprint remote = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100,
                                                      IssueOrder{3, issueLaneId("123456789"), 4});
  EXPECT_EQ(describeFingerprint(remote), "{allreduce op=sum dtype=f32 count=100 seq=3 lane 0xcbf43926 #4}");
  // A lane number without a lane (only a malformed fingerprint has one).
  Fingerprint orphan = plain;
  orphan.laneSeq = 6;
  EXPECT_EQ(describeFingerprint(orphan), "{allreduce op=sum dtype=f32 count=100 seq=3 lane none #6}");
}

// A send/recv carries its lane but no lane number (its message number orders one lane's messages).
TEST(FingerprintTest, SendRecvNamesItsLaneWithoutANumber) {
  const uint32_t lane = IssueLane("fp-p2p").id();
  const Fingerprint f = makeFingerprint(CollectiveKind::kSendRecv, ReduceOp::kSum, DataType::kUint8, 64, 7,
                                        IssueOrder{2, lane, 0});
  EXPECT_EQ(describeFingerprint(f), "{sendrecv dtype=u8 count=64 tag=7 seq=2 lane 'fp-p2p'}");
}

TEST(FingerprintTest, MakeAllreduceFillsFields) {
  const Fingerprint f =
      makeAllreduceFingerprint(ReduceOp::kMax, DataType::kBFloat16, 0x123456789ull, IssueOrder{77});
  EXPECT_EQ(f.magic, kFingerprintMagic);
  EXPECT_EQ(f.collective, 0u);
  EXPECT_EQ(f.op, static_cast<uint8_t>(ReduceOp::kMax));
  EXPECT_EQ(f.dtype, static_cast<uint8_t>(DataType::kBFloat16));
  EXPECT_EQ(f.flags, 0u);
  EXPECT_EQ(f.count, 0x123456789ull);
  EXPECT_EQ(f.seq, 77u);
}

TEST(FingerprintTest, DescribeExact) {
  EXPECT_EQ(
      describeFingerprint(makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3})),
      "{allreduce op=sum dtype=f32 count=100 seq=3}");
  EXPECT_EQ(describeFingerprint(makeAllreduceFingerprint(ReduceOp::kAvg, DataType::kUint8, 0, IssueOrder{0})),
            "{allreduce op=avg dtype=u8 count=0 seq=0}");
  for (ReduceOp op : kAllReduceOps) {
    for (DataType dt : kAllDataTypes) {
      const std::string d = describeFingerprint(makeAllreduceFingerprint(op, dt, 5, IssueOrder{6}));
      EXPECT_EQ(d, std::string("{allreduce op=") + reduceOpName(op) + " dtype=" + dataTypeName(dt) +
                       " count=5 seq=6}");
    }
  }
  Fingerprint invalid = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 1, IssueOrder{2});
  invalid.flags = kFingerprintInvalidInput;
  EXPECT_EQ(describeFingerprint(invalid), "{allreduce op=sum dtype=f32 count=1 seq=2 invalid-arguments}");
}

TEST(FingerprintTest, PremulSumCarriesItsFactor) {
  ReduceOp half = ReduceOp::kSum, quarter = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  ASSERT_TRUE(makePremulSum(0.25, &quarter).isOk());
  const Fingerprint a =
      makeFingerprint(CollectiveKind::kReduceScatter, half, DataType::kBFloat16, 8, kNoRoot, IssueOrder{1});
  const Fingerprint b = makeFingerprint(CollectiveKind::kReduceScatter, quarter, DataType::kBFloat16, 8,
                                        kNoRoot, IssueOrder{1});
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
  const Fingerprint c = makeFingerprint(CollectiveKind::kReduceScatter, ReduceOp::kSum, DataType::kBFloat16,
                                        8, kNoRoot, IssueOrder{1});
  EXPECT_EQ(compareFingerprints(0, a, 1, c).code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(compareFingerprints(0, a, 1, a).isOk());
}

TEST(FingerprintTest, EqualFingerprintsCompareOk) {
  const Fingerprint a = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3});
  const Fingerprint b = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3});
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
  const Fingerprint mine = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3});
  const std::string mineText = "{allreduce op=sum dtype=f32 count=100 seq=3}";
  const MismatchCase cases[] = {
      {"op", makeAllreduceFingerprint(ReduceOp::kMax, DataType::kFloat32, 100, IssueOrder{3}),
       "{allreduce op=max dtype=f32 count=100 seq=3}"},
      {"dtype", makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat16, 100, IssueOrder{3}),
       "{allreduce op=sum dtype=f16 count=100 seq=3}"},
      {"count", makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 99, IssueOrder{3}),
       "{allreduce op=sum dtype=f32 count=99 seq=3}"},
      {"seq", makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{4}),
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
  const Fingerprint mine = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3});
  Fingerprint invalid = mine;
  invalid.flags = kFingerprintInvalidInput;
  Status s = compareFingerprints(1, mine, 3, invalid);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(contains(s.message(),
                       "rank 3 has {allreduce op=sum dtype=f32 count=100 seq=3 invalid-arguments} (rank 3 "
                       "rejected the arguments of its call before it reached the collective; its own "
                       "error names them)"))
      << s.message();

  // A call above the peer windows (its marker there, DirectPath::offPath) against one that fits them: the
  // side on the host-driven path is named, whichever side it is.
  Fingerprint big = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 1000000, IssueOrder{3});
  big.flags = kFingerprintOffWindows;
  for (const bool bigSecond : {true, false}) {
    s = bigSecond ? compareFingerprints(1, mine, 3, big) : compareFingerprints(3, big, 1, mine);
    EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
    EXPECT_TRUE(contains(s.message(),
                         "rank 3 has {allreduce op=sum dtype=f32 count=1000000 seq=3 "
                         "off-the-peer-windows}"))
        << s.message();
    EXPECT_TRUE(contains(s.message(), "rank 1 has {allreduce op=sum dtype=f32 count=100 seq=3}"))
        << s.message();
    EXPECT_TRUE(contains(s.message(),
                         "(rank 3's call is above the peer windows' size (RINGGUARD_PEER_BYTES) "
                         "and runs on the host-driven path, rank 1's on the windows: the ranks' "
                         "calls differ in size)"))
        << s.message();
  }
  // Two markers agree when the calls do.
  EXPECT_TRUE(compareFingerprints(1, big, 3, big).isOk());

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
      makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, DataType::kInt32, 8, 0, IssueOrder{2});
  const Fingerprint b1 =
      makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, DataType::kInt32, 8, 1, IssueOrder{2});
  s = compareFingerprints(0, b0, 2, b1);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(contains(s.message(),
                       "rank 0 has {broadcast dtype=i32 count=8 root=0 seq=2}, rank 2 has "
                       "{broadcast dtype=i32 count=8 root=1 seq=2}"))
      << s.message();
}

TEST(FingerprintTest, InvalidOpOrDtypeByteIsDescribedAsInvalid) {
  Fingerprint f = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 8, IssueOrder{1});
  f.op = 9;  // one past kPremulSum (premul_sum handles never go on the wire)
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=invalid dtype=f32 count=8 seq=1}");
  f.op = 0xFF;
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=invalid dtype=f32 count=8 seq=1}");
  f.op = static_cast<uint8_t>(ReduceOp::kProd);
  f.dtype = 14;  // one past kComplex128
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=prod dtype=invalid count=8 seq=1}");
  f.dtype = 200;
  EXPECT_EQ(describeFingerprint(f), "{allreduce op=prod dtype=invalid count=8 seq=1}");

  const Status s = compareFingerprints(
      0, makeAllreduceFingerprint(ReduceOp::kProd, DataType::kFloat32, 8, IssueOrder{1}), 1, f);
  EXPECT_EQ(s.code(), StatusCode::kFingerprintMismatch);
  EXPECT_TRUE(contains(s.message(), "rank 1 has {allreduce op=prod dtype=invalid count=8 seq=1}"))
      << s.message();
}

TEST(FingerprintTest, BadMagicIsMalformed) {
  const Fingerprint mine = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 100, IssueOrder{3});
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
