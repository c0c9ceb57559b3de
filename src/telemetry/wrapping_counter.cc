#include "ringguard/telemetry/wrapping_counter.h"

#include <cmath>

#include "ringguard/core/status.h"

namespace ringguard {

WrappingCounter::WrappingCounter(unsigned bits)
    : bits_(bits), mask_(bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1) {
  RINGGUARD_ENFORCE(bits >= 1 && bits <= 64, "WrappingCounter: bits must be in [1, 64]");
}

uint64_t WrappingCounter::update(uint64_t raw) {
  raw &= mask_;
  if (!primed_) {
    primed_ = true;
    last_ = raw;
    return 0;
  }
  if (raw < last_) ++wraps_;
  // Unsigned subtraction modulo 2^64, then modulo the counter's span: one wrap between readings is exact.
  const uint64_t delta = (raw - last_) & mask_;
  last_ = raw;
  total_ += delta;
  return delta;
}

void WrappingCounter::reset() {
  primed_ = false;
  last_ = 0;
  total_ = 0;
  wraps_ = 0;
}

double WrappingCounter::span() const { return std::ldexp(1.0, static_cast<int>(bits_)); }

}  // namespace ringguard
