// Fingerprint comparison (core/fingerprint.h): any two 40-byte fingerprints as two ranks sent them, and a
// fingerprint made from any collective, op, dtype, count, root, premul_sum factor and issue order. Input:
// fingerprint a, fingerprint b (40 bytes each), rank a, rank b (int32), a mode byte, a byte index, then
// kind, op, dtype (one byte each), count, seq (uint64), root (int32), factor (double), lane, lane number
// (uint32). Mode bit 0 makes b a copy of a with byte `index` changed when bit 1 is set too; bit 6 enters
// the issue lane "fuzz" (so a fingerprint of that lane is described by name, others by id).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/fingerprint.h"
#include "fuzz_util.h"
#include "ringguard/core/issue_lane.h"
#include "ringguard/core/types.h"

using namespace ringguard;
using ringguard::fuzz::FuzzInput;

namespace {

void checkDescription(const Fingerprint& f) {
  const std::string d = describeFingerprint(f);
  RINGGUARD_FUZZ_CHECK(d.size() >= 2 && d.front() == '{' && d.back() == '}');
}

void checkCompare(int rankA, const Fingerprint& a, int rankB, const Fingerprint& b) {
  const bool same = std::memcmp(&a, &b, sizeof a) == 0;  // no padding: every byte is a field
  const Status ab = compareFingerprints(rankA, a, rankB, b);
  const Status ba = compareFingerprints(rankB, b, rankA, a);
  RINGGUARD_FUZZ_CHECK(ab.isOk() == same && ba.isOk() == same);
  if (!same) {
    RINGGUARD_FUZZ_CHECK(ab.code() == StatusCode::kFingerprintMismatch);
    const std::string& m = ab.message();
    RINGGUARD_FUZZ_CHECK(m.find("rank " + std::to_string(rankA) + " has " + describeFingerprint(a)) !=
                         std::string::npos);
    RINGGUARD_FUZZ_CHECK(m.find("rank " + std::to_string(rankB) + " has " + describeFingerprint(b)) !=
                         std::string::npos);
  }
  checkDescription(a);
  checkDescription(b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static_assert(sizeof(Fingerprint) == 40, "fixed wire format");
  FuzzInput in(data, size);
  const Fingerprint a = in.take<Fingerprint>();
  Fingerprint b = in.take<Fingerprint>();
  const int rankA = in.take<int32_t>();
  const int rankB = in.take<int32_t>();
  const uint8_t mode = in.take<uint8_t>();
  const uint8_t index = in.take<uint8_t>() % sizeof(Fingerprint);
  if (mode & 1) {
    b = a;
    if (mode & 2) reinterpret_cast<uint8_t*>(&b)[index] ^= uint8_t(1 + (mode >> 2));
  }
  checkCompare(rankA, a, rankB, b);

  // A fingerprint as makeFingerprint builds it, for any arguments: valid ones and garbage alike.
  const auto kind = static_cast<CollectiveKind>(in.take<uint8_t>());
  auto op = static_cast<ReduceOp>(in.take<uint8_t>());
  const auto dtype = static_cast<DataType>(in.take<uint8_t>());
  const uint64_t count = in.take<uint64_t>();
  const uint64_t seq = in.take<uint64_t>();
  const int32_t root = in.take<int32_t>();
  const double factor = in.take<double>();
  const uint32_t lane = in.take<uint32_t>();
  const uint32_t laneSeq = in.take<uint32_t>();
  std::unique_ptr<IssueLane> entered;
  if (mode & 0x40) entered = std::make_unique<IssueLane>("fuzz");
  if (mode & 0x80) {
    // premul_sum with this factor; the process keeps at most 128 distinct factors, after which
    // makePremulSum refuses and the bare kind is used.
    ReduceOp premul;
    if (makePremulSum(factor, &premul).isOk()) op = premul;
  }
  const Fingerprint made = makeFingerprint(kind, op, dtype, count, root, IssueOrder{seq, lane, laneSeq});
  RINGGUARD_FUZZ_CHECK(made.magic == kFingerprintMagic && made.count == count && made.seq == seq &&
                       made.root == root && made.flags == 0 && made.lane == lane && made.laneSeq == laneSeq);
  checkCompare(rankA, made, rankB, made);
  Fingerprint other = made;
  other.seq = seq + 1;
  checkCompare(rankA, made, rankB, other);
  // A lane is named in the description whenever there is one (by name when this process entered it).
  const std::string d = describeFingerprint(made);
  RINGGUARD_FUZZ_CHECK((d.find(" lane ") != std::string::npos) == (lane != kNoIssueLane || laneSeq != 0));
  if (lane == issueLaneId("fuzz") && entered)
    RINGGUARD_FUZZ_CHECK(d.find(" lane 'fuzz'") != std::string::npos);
  // Another lane, or another number of the same lane: a mismatch that says the lanes' order differs.
  Fingerprint otherLane = made;
  otherLane.lane = lane + 1;
  otherLane.laneSeq = laneSeq + 1;
  checkCompare(rankA, made, rankB, otherLane);
  RINGGUARD_FUZZ_CHECK(
      compareFingerprints(rankA, made, rankB, otherLane).message().find("different issue lanes") !=
      std::string::npos);
  RINGGUARD_FUZZ_CHECK(collectiveKindName(kind) != nullptr);
  return 0;
}
