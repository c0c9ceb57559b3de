#pragma once
// The collective fingerprint: the first fixed-size message of every collective. A mismatch is an error
// on every rank before any payload moves.
#include <cstdint>
#include <string>

#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

inline constexpr uint32_t kFingerprintMagic = 0x31504652;  // "RFP1"
inline constexpr uint8_t kFingerprintInvalidInput = 1;     // the caller's arguments were rejected

struct Fingerprint {
  uint32_t magic = kFingerprintMagic;
  uint8_t collective = 0;  // 0 = allreduce
  uint8_t op = 0;
  uint8_t dtype = 0;
  uint8_t flags = 0;
  uint64_t count = 0;
  uint64_t seq = 0;
  bool operator==(const Fingerprint& o) const {
    return magic == o.magic && collective == o.collective && op == o.op && dtype == o.dtype &&
           flags == o.flags && count == o.count && seq == o.seq;
  }
};
static_assert(sizeof(Fingerprint) == 24, "fingerprint is a fixed wire format");

Fingerprint makeAllreduceFingerprint(ReduceOp op, DataType dtype, uint64_t count, uint64_t seq);
// "{allreduce op=sum dtype=f32 count=100 seq=3}"
std::string describeFingerprint(const Fingerprint& f);
// OK when equal; otherwise kFingerprintMismatch naming both ranks and both values.
Status compareFingerprints(int rankA, const Fingerprint& a, int rankB, const Fingerprint& b);

}  // namespace ringguard
