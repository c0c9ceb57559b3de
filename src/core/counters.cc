#include "ringguard/core/counters.h"

#include <sstream>

namespace ringguard {

namespace {
// Every field, once: what += and since() walk.
constexpr uint64_t Counters::*kFields[] = {
    &Counters::collectives,     &Counters::bytesSent,    &Counters::slicesSent,     &Counters::slicesVerified,
    &Counters::injected,        &Counters::detected,     &Counters::retransmitted,  &Counters::escaped,
    &Counters::delayed,         &Counters::repairRounds, &Counters::controlFrames,  &Counters::controlBytes,
    &Counters::nonFiniteInputs, &Counters::skipped,      &Counters::transferWaitNs, &Counters::applyNs,
    &Counters::executorWaitNs};
static_assert(sizeof(kFields) / sizeof(kFields[0]) * sizeof(uint64_t) == sizeof(Counters),
              "kFields lists every counter");
}  // namespace

Counters& Counters::operator+=(const Counters& o) {
  for (auto f : kFields) this->*f += o.*f;
  return *this;
}

Counters Counters::since(const Counters& e) const {
  Counters d;
  for (auto f : kFields) d.*f = this->*f - e.*f;
  return d;
}

std::string Counters::toString() const {
  std::ostringstream os;
  os << "collectives=" << collectives << " bytes_sent=" << bytesSent << " slices_sent=" << slicesSent
     << " slices_verified=" << slicesVerified << " injected=" << injected << " detected=" << detected
     << " retransmitted=" << retransmitted << " escaped=" << escaped << " delayed=" << delayed
     << " repair_rounds=" << repairRounds << " control_frames=" << controlFrames
     << " control_bytes=" << controlBytes << " non_finite_inputs=" << nonFiniteInputs
     << " skipped=" << skipped << " transfer_wait_ms=" << transferWaitNs / 1e6
     << " apply_ms=" << applyNs / 1e6 << " executor_wait_ms=" << executorWaitNs / 1e6;
  return os.str();
}

}  // namespace ringguard
