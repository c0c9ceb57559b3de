#pragma once
// The direct path's timeline spans (docs/GPU.md, "Timeline spans of the path's calls"): when the timeline is
// on, each call of the peer windows runs between two one-thread clock kernels on its stream
// (cuda/peer/call_clock.cu), the second of which writes the call's start and end (%globaltimer, ns) into a
// ring of CallClock entries in mapped pinned memory, slot epoch % kCallClocks, the epoch last; the host
// drains the ring into spans on the communicator's track. One layout for the kernels and the host
// (runtime/device/peer_path.cc), and the host's drain in one place, tested without a GPU
// (tests/unit/test_call_clock.cc).
#include <cstdint>

#include "core/function_ref.h"
#include "core/host_device.h"

namespace ringguard {
namespace peer {

inline constexpr uint32_t kCallClocks = 256;  // entries of the ring: calls between two drains kept

struct CallClock {
  uint64_t startNs;      // %globaltimer in the clock kernel before the call's kernels
  uint64_t endNs;        // %globaltimer in the clock kernel after them
  uint32_t fingerprint;  // the call's fingerprint word 0 (kind; flags in byte 1)
  uint32_t dtype;        // fingerprint word 1
  uint64_t count;        // fingerprint words 3 and 4: the count the call's fingerprint names
  uint64_t epoch;        // the collective's epoch (1, 2, ...); written last, after a system fence
  uint64_t pad[3];
};
static_assert(sizeof(CallClock) == 64, "one entry a 64-byte line");

RINGGUARD_HOST_DEVICE inline uint32_t callClockSlot(uint64_t epoch) { return uint32_t(epoch % kCallClocks); }

// A finished call as the host reads it: its times on the host's steady clock (trace::nowNs).
struct FinishedCall {
  uint64_t epoch = 0;
  uint64_t startNs = 0;
  uint64_t durNs = 0;
  uint32_t fingerprint = 0;
  uint32_t dtype = 0;
  uint64_t count = 0;
};

// Hands `take` every call of the ring with an epoch of at least *next, in epoch order, and moves *next past
// the last one taken. An entry is taken only when it still holds its epoch after its fields were read (the
// kernel of epoch + kCallClocks may be rewriting the slot). `offsetNs` turns %globaltimer into the host's
// steady clock (host = gpu + offset). Returns the calls lost: epochs skipped because their slot was
// overwritten before this drain reached it (more than kCallClocks calls between two drains).
uint64_t drainCallClocks(const volatile CallClock* ring, uint64_t* next, int64_t offsetNs,
                         FunctionRef<void(const FinishedCall&)> take);

}  // namespace peer
}  // namespace ringguard
