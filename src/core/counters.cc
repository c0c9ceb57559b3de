#include "ringguard/core/counters.h"

#include <sstream>

namespace ringguard {

namespace {
struct Field {
  const char* name;  // snake_case, as in summaries and logs
  uint64_t Counters::*member;
};
// Every field, once: what +=, since(), forEach() and toString() walk.
constexpr Field kFields[] = {{"collectives", &Counters::collectives},
                             {"bytes_sent", &Counters::bytesSent},
                             {"slices_sent", &Counters::slicesSent},
                             {"slices_verified", &Counters::slicesVerified},
                             {"injected", &Counters::injected},
                             {"detected", &Counters::detected},
                             {"retransmitted", &Counters::retransmitted},
                             {"escaped", &Counters::escaped},
                             {"delayed", &Counters::delayed},
                             {"repair_rounds", &Counters::repairRounds},
                             {"control_frames", &Counters::controlFrames},
                             {"control_bytes", &Counters::controlBytes},
                             {"non_finite_inputs", &Counters::nonFiniteInputs},
                             {"skipped", &Counters::skipped},
                             {"transfer_wait_ns", &Counters::transferWaitNs},
                             {"apply_ns", &Counters::applyNs},
                             {"executor_wait_ns", &Counters::executorWaitNs}};
static_assert(sizeof(kFields) / sizeof(kFields[0]) * sizeof(uint64_t) == sizeof(Counters),
              "kFields lists every counter");
}  // namespace

Counters& Counters::operator+=(const Counters& o) {
  for (const Field& f : kFields) this->*f.member += o.*f.member;
  return *this;
}

Counters Counters::since(const Counters& e) const {
  Counters d;
  for (const Field& f : kFields) d.*f.member = this->*f.member - e.*f.member;
  return d;
}

void Counters::forEach(const std::function<void(const char* name, uint64_t value)>& visit) const {
  for (const Field& f : kFields) visit(f.name, this->*f.member);
}

std::string Counters::toString() const {
  std::ostringstream os;
  const char* sep = "";
  forEach([&](const char* name, uint64_t value) {
    const std::string n(name);
    // Times read better in milliseconds: "apply_ns" is shown as "apply_ms".
    if (n.size() > 3 && n.compare(n.size() - 3, 3, "_ns") == 0) {
      os << sep << n.substr(0, n.size() - 3) << "_ms=" << double(value) / 1e6;
    } else {
      os << sep << n << "=" << value;
    }
    sep = " ";
  });
  return os.str();
}

}  // namespace ringguard
