#pragma once
// A hardware counter that is narrower than the quantity it counts (NVML's PCIe byte counters are 32 bits
// wide and wrap every ~70 ms at 58 GB/s). The count is rebuilt from deltas between readings, modulo the
// counter's width: correct as long as fewer than 2^bits events happen between two readings, which the
// caller checks against the link's maximum rate (PcieCounters does).
#include <cstdint>

namespace ringguard {

class WrappingCounter {
 public:
  // `bits` in [1, 64].
  explicit WrappingCounter(unsigned bits);

  // Feeds a raw reading (only its low `bits` bits are used) and returns the events since the previous
  // reading; the first reading returns 0 and only primes the counter.
  uint64_t update(uint64_t raw);
  void reset();

  bool primed() const { return primed_; }
  unsigned bits() const { return bits_; }
  uint64_t total() const { return total_; }  // events since the first reading (unwrapped)
  uint64_t wraps() const { return wraps_; }  // readings that were below the previous one
  // 2^bits as a double (the span of the counter), for the caller's aliasing check.
  double span() const;

 private:
  unsigned bits_;
  uint64_t mask_;
  bool primed_ = false;
  uint64_t last_ = 0;
  uint64_t total_ = 0;
  uint64_t wraps_ = 0;
};

}  // namespace ringguard
