#include "core/call_clock.h"

#include <atomic>

namespace ringguard {
namespace peer {

namespace {

// One entry read as a seqlock: the end clock kernel zeroes the epoch, fences, writes the fields, fences and
// writes the epoch (cuda/peer/call_clock.cu), so fields read between two equal reads of the epoch are that
// epoch's.
bool readEntry(const volatile CallClock& e, uint64_t epoch, int64_t offsetNs, FinishedCall* out) {
  std::atomic_thread_fence(std::memory_order_acquire);
  out->epoch = epoch;
  const uint64_t start = e.startNs, end = e.endNs;
  out->fingerprint = e.fingerprint;
  out->dtype = e.dtype;
  out->count = e.count;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.epoch != epoch) return false;
  out->startNs = uint64_t(int64_t(start) + offsetNs);
  out->durNs = end >= start ? end - start : 0;
  return true;
}

}  // namespace

uint64_t drainCallClocks(const volatile CallClock* ring, uint64_t* next, int64_t offsetNs,
                         FunctionRef<void(const FinishedCall&)> take) {
  uint64_t lost = 0;
  if (*next == 0) {
    // Not known yet (the clocks were turned on after the path's first calls): the oldest epoch in the ring.
    uint64_t oldest = 0;
    for (uint32_t s = 0; s < kCallClocks; ++s) {
      const uint64_t e = ring[s].epoch;
      if (e != 0 && (oldest == 0 || e < oldest)) oldest = e;
    }
    if (oldest == 0) return 0;
    *next = oldest;
  }
  for (;;) {
    const volatile CallClock& entry = ring[callClockSlot(*next)];
    const uint64_t e = entry.epoch;
    if (e == *next) {
      FinishedCall call;
      if (!readEntry(entry, e, offsetNs, &call)) continue;  // rewritten while read: look again
      take(call);
      ++*next;
      continue;
    }
    // 0 (being written, or never) or an older epoch: this call has not finished yet.
    if (e < *next) return lost;
    // A later call's: every epoch up to e - kCallClocks was overwritten (the kernels finish in epoch order).
    const uint64_t kept = e - kCallClocks + 1;
    lost += kept - *next;
    *next = kept;
  }
}

}  // namespace peer
}  // namespace ringguard
