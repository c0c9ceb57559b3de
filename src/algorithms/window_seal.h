#pragma once
// A peer's seal in its window (transport/window.h: HalfSeal of a collective's publication, SlotSeal of a
// send/recv message; a fingerprint and the CRC of the bytes before `crc`), read as the one-sided protocol
// reads it: a private copy whose CRC holds, re-read from the seal the peer retains on a failure.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "algorithms/agreement.h"
#include "core/fault_injector.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

// Up to maxRetries + 1 reads of `shared` (peer `from`'s seal) into `out`; control-mode fault injection
// damages the first read, keyed as the fingerprint frame from `from` would be. Counts the injected, detected
// and re-read copies. False when every read failed its CRC (`*reads` says how many there were).
template <typename Seal>
bool readSealCopy(const CollectiveContext& ctx, const Seal& shared, int from, int me, Seal* out, int* reads) {
  *reads = std::max(1, ctx.options->maxRetries + 1);
  for (int attempt = 0; attempt < *reads; ++attempt) {
    if (attempt > 0) ctx.counters->retransmitted++;  // re-read from the seal the peer retains
    Seal copy;
    std::memcpy(&copy, &shared, sizeof copy);
    if (attempt == 0 && ctx.injector != nullptr &&
        ctx.injector->corruptsControl(ctx.seq, int(ControlTag::kFingerprint), from, me) &&
        ctx.injector->corruptControl(ctx.seq, int(ControlTag::kFingerprint), from, me,
                                     reinterpret_cast<uint8_t*>(&copy), sizeof copy)) {
      ctx.counters->injected++;
    }
    if (crc32(&copy, offsetof(Seal, crc)) == copy.crc) {
      *out = copy;
      return true;
    }
    ctx.counters->detected++;
  }
  return false;
}

}  // namespace ringguard
