#include "ringguard/core/counters.h"

#include <sstream>

namespace ringguard {

Counters& Counters::operator+=(const Counters& o) {
  collectives += o.collectives;
  bytesSent += o.bytesSent;
  slicesSent += o.slicesSent;
  slicesVerified += o.slicesVerified;
  injected += o.injected;
  detected += o.detected;
  retransmitted += o.retransmitted;
  escaped += o.escaped;
  delayed += o.delayed;
  repairRounds += o.repairRounds;
  transferWaitNs += o.transferWaitNs;
  applyNs += o.applyNs;
  executorWaitNs += o.executorWaitNs;
  return *this;
}

Counters Counters::since(const Counters& e) const {
  Counters d;
  d.collectives = collectives - e.collectives;
  d.bytesSent = bytesSent - e.bytesSent;
  d.slicesSent = slicesSent - e.slicesSent;
  d.slicesVerified = slicesVerified - e.slicesVerified;
  d.injected = injected - e.injected;
  d.detected = detected - e.detected;
  d.retransmitted = retransmitted - e.retransmitted;
  d.escaped = escaped - e.escaped;
  d.delayed = delayed - e.delayed;
  d.repairRounds = repairRounds - e.repairRounds;
  d.transferWaitNs = transferWaitNs - e.transferWaitNs;
  d.applyNs = applyNs - e.applyNs;
  d.executorWaitNs = executorWaitNs - e.executorWaitNs;
  return d;
}

std::string Counters::toString() const {
  std::ostringstream os;
  os << "collectives=" << collectives << " bytes_sent=" << bytesSent << " slices_sent=" << slicesSent
     << " slices_verified=" << slicesVerified << " injected=" << injected << " detected=" << detected
     << " retransmitted=" << retransmitted << " escaped=" << escaped << " delayed=" << delayed
     << " repair_rounds=" << repairRounds << " transfer_wait_ms=" << transferWaitNs / 1e6
     << " apply_ms=" << applyNs / 1e6 << " executor_wait_ms=" << executorWaitNs / 1e6;
  return os.str();
}

}  // namespace ringguard
