#include "core/fingerprint.h"

#include <cstring>
#include <iomanip>
#include <sstream>

#include "ringguard/core/issue_lane.h"

namespace ringguard {

const char* collectiveKindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAlltoall:
      return "alltoall";
    case CollectiveKind::kSendRecv:
      return "sendrecv";
  }
  return "collective?";
}

namespace {
bool reduces(CollectiveKind k) {
  return k == CollectiveKind::kAllreduce || k == CollectiveKind::kReduceScatter;
}
}  // namespace

Fingerprint makeFingerprint(CollectiveKind kind, ReduceOp op, DataType dtype, uint64_t count, int32_t root,
                            const IssueOrder& order) {
  Fingerprint f;
  f.collective = static_cast<uint8_t>(kind);
  if (reduces(kind)) {
    f.op = static_cast<uint8_t>(baseOp(op));
    if (isPremulSum(op)) {
      const float factor = float(premulFactor(op));
      std::memcpy(&f.opScalar, &factor, sizeof factor);
    }
  }
  f.dtype = static_cast<uint8_t>(dtype);
  f.count = count;
  f.seq = order.seq;
  f.root = root;
  f.lane = order.lane;
  f.laneSeq = order.laneSeq;
  return f;
}

std::string describeFingerprint(const Fingerprint& f) {
  std::ostringstream os;
  if (f.magic != kFingerprintMagic) {
    os << "{malformed fingerprint}";
    return os.str();
  }
  const auto kind = static_cast<CollectiveKind>(f.collective);
  os << "{" << collectiveKindName(kind);
  auto op = static_cast<ReduceOp>(f.op);
  auto dt = static_cast<DataType>(f.dtype);
  if (reduces(kind)) {
    if (op == ReduceOp::kPremulSum) {
      float factor;
      std::memcpy(&factor, &f.opScalar, sizeof factor);
      os << " op=premul_sum(" << factor << ")";
    } else {
      os << " op=" << (isValid(op) ? reduceOpName(op) : "invalid");
    }
  }
  os << " dtype=" << (isValid(dt) ? dataTypeName(dt) : "invalid") << " count=" << f.count;
  if (f.root != kNoRoot) os << (kind == CollectiveKind::kSendRecv ? " tag=" : " root=") << f.root;
  os << " seq=" << f.seq;
  if (f.lane != kNoIssueLane || f.laneSeq != 0) {
    const std::string name = issueLaneName(f.lane);
    os << " lane ";
    if (f.lane == kNoIssueLane) {
      os << "none";
    } else if (name.empty()) {  // entered only in another process: its id (a CRC-32 can't be reversed)
      os << "0x" << std::hex << std::setw(8) << std::setfill('0') << f.lane << std::dec << std::setfill(' ');
    } else {
      os << "'" << name << "'";
    }
    if (kind != CollectiveKind::kSendRecv || f.laneSeq != 0) os << " #" << f.laneSeq;
  }
  if (f.flags & kFingerprintInvalidInput) os << " invalid-arguments";
  if (f.flags & kFingerprintOffWindows) os << " off-the-peer-windows";
  os << "}";
  return os.str();
}

Status compareFingerprints(int rankA, const Fingerprint& a, int rankB, const Fingerprint& b) {
  if (a == b) return Status::ok();
  std::ostringstream os;
  os << "collective fingerprint mismatch: rank " << rankA << " has " << describeFingerprint(a) << ", rank "
     << rankB << " has " << describeFingerprint(b);
  Fingerprint laneless = b;
  laneless.lane = a.lane;
  laneless.laneSeq = a.laneSeq;
  if (laneless == a) {
    os << (a.lane != b.lane ? " (the same collective from different issue lanes"
                            : " (the same collective at different positions of one issue lane")
       << ": threads issued same-shape collectives in a different order on these ranks)";
  } else if ((a.flags | b.flags) & kFingerprintInvalidInput) {
    // Communicator::rejectedAsync: that side's op, dtype and count are placeholders.
    os << " (rank " << ((b.flags & kFingerprintInvalidInput) ? rankB : rankA)
       << " rejected the arguments of its call before it reached the collective; its own error names them)";
  } else if ((a.flags ^ b.flags) & kFingerprintOffWindows) {
    const bool bOff = (b.flags & kFingerprintOffWindows) != 0;
    os << " (rank " << (bOff ? rankB : rankA)
       << "'s call is above the peer windows' size (RINGGUARD_PEER_BYTES) and runs on the host-driven path, "
          "rank "
       << (bOff ? rankA : rankB) << "'s on the windows: the ranks' calls differ in size)";
  }
  return Status(StatusCode::kFingerprintMismatch, os.str());
}

}  // namespace ringguard
