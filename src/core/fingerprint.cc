#include "ringguard/core/fingerprint.h"

#include <sstream>

namespace ringguard {

Fingerprint makeAllreduceFingerprint(ReduceOp op, DataType dtype, uint64_t count, uint64_t seq) {
  Fingerprint f;
  f.op = static_cast<uint8_t>(op);
  f.dtype = static_cast<uint8_t>(dtype);
  f.count = count;
  f.seq = seq;
  return f;
}

std::string describeFingerprint(const Fingerprint& f) {
  std::ostringstream os;
  if (f.magic != kFingerprintMagic) {
    os << "{malformed fingerprint}";
    return os.str();
  }
  os << "{" << (f.collective == 0 ? "allreduce" : "collective?");
  auto op = static_cast<ReduceOp>(f.op);
  auto dt = static_cast<DataType>(f.dtype);
  os << " op=" << (isValid(op) ? reduceOpName(op) : "invalid")
     << " dtype=" << (isValid(dt) ? dataTypeName(dt) : "invalid") << " count=" << f.count << " seq=" << f.seq;
  if (f.flags & kFingerprintInvalidInput) os << " invalid-arguments";
  os << "}";
  return os.str();
}

Status compareFingerprints(int rankA, const Fingerprint& a, int rankB, const Fingerprint& b) {
  if (a == b) return Status::ok();
  std::ostringstream os;
  os << "collective fingerprint mismatch: rank " << rankA << " has " << describeFingerprint(a) << ", rank "
     << rankB << " has " << describeFingerprint(b);
  return Status(StatusCode::kFingerprintMismatch, os.str());
}

}  // namespace ringguard
