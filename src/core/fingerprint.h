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
// The call runs on the host-driven path although the peer windows carry its kind: it is above their size
// (RINGGUARD_PEER_BYTES). Its marker on the windows (DirectPath::offPath) carries it, so that a rank whose
// call of the same collective fits the windows fails at once naming both.
inline constexpr uint8_t kFingerprintOffWindows = 2;

// CollectiveKind: ringguard/core/types.h.
const char* collectiveKindName(CollectiveKind k);  // "allreduce", "reduce_scatter", "allgather", ...
inline constexpr int32_t kNoRoot = -1;             // collectives without a root

struct Fingerprint {
  uint32_t magic = kFingerprintMagic;
  uint8_t collective = 0;  // CollectiveKind
  uint8_t op = 0;          // baseOp(ReduceOp) (0 for collectives that do not reduce)
  uint8_t dtype = 0;
  uint8_t flags = 0;
  uint64_t count = 0;  // per-rank element count as the collective defines it (e.g. recvCount)
  uint64_t seq = 0;
  int32_t root = kNoRoot;  // broadcast's root; sendrecv's tag
  // premul_sum: the f32 bits of its factor (ranks whose factors differ at f32 precision mismatch; op
  // handles are per process, so the factor, not the handle, goes on the wire). 0 for every other op.
  uint32_t opScalar = 0;
  // The issuing thread's issue lane (ringguard/core/issue_lane.h; kNoIssueLane: none) and the lane's own
  // number of this collective on its communicator (mod 2^32; 0 without a lane, and for sendrecv, whose
  // message number per (peer, direction) already orders a lane's messages).
  uint32_t lane = 0;
  uint32_t laneSeq = 0;
  bool operator==(const Fingerprint& o) const {
    return magic == o.magic && collective == o.collective && op == o.op && dtype == o.dtype &&
           flags == o.flags && count == o.count && seq == o.seq && root == o.root && opScalar == o.opScalar &&
           lane == o.lane && laneSeq == o.laneSeq;
  }
};
// 40 bytes since protocol version 4 (the lane); 32 before.
static_assert(sizeof(Fingerprint) == 40, "fingerprint is a fixed wire format");

// Where a collective stands in its rank's issue order: its number (the communicator's collective number;
// sendrecv: the message number of its (peer, direction)) and its issue lane with the lane's own number.
struct IssueOrder {
  uint64_t seq = 0;
  uint32_t lane = 0;  // kNoIssueLane
  uint32_t laneSeq = 0;
};

Fingerprint makeFingerprint(CollectiveKind kind, ReduceOp op, DataType dtype, uint64_t count, int32_t root,
                            const IssueOrder& order);
inline Fingerprint makeAllreduceFingerprint(ReduceOp op, DataType dtype, uint64_t count,
                                            const IssueOrder& order) {
  return makeFingerprint(CollectiveKind::kAllreduce, op, dtype, count, kNoRoot, order);
}
// "{allreduce op=sum dtype=f32 count=100 seq=3}", "{broadcast dtype=f32 count=8 root=2 seq=5}",
// "{reduce_scatter op=premul_sum(0.25) dtype=bf16 count=8 seq=1}", and with an issue lane
// "{allreduce op=sum dtype=f32 count=100 seq=3 lane 'prefetch' #1}" (sendrecv: "lane 'prefetch'"; a lane
// this process never entered by its id: "lane 0x1a2b3c4d #1").
std::string describeFingerprint(const Fingerprint& f);
// OK when equal; otherwise kFingerprintMismatch naming both ranks and both values.
Status compareFingerprints(int rankA, const Fingerprint& a, int rankB, const Fingerprint& b);

}  // namespace ringguard
