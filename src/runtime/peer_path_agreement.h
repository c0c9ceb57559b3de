#pragma once
// What the ranks of a peer-window path agree on before their windows exist (runtime/device/device_factory.cc
// gathers the records; docs/GPU.md, "The one-sided path"): each rank's record of the settings that must be
// the same everywhere, its process and its fault schedule's size, and what every rank concludes from the same
// gathered records. Host code with no CUDA, so that the decision is tested on CI (tests/unit).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ringguard/core/non_finite.h"
#include "ringguard/core/status.h"

namespace ringguard {

// One rank's record: "<two-shot bytes> <nan check> <pid> <schedule entries>" (fields without spaces).
std::vector<uint8_t> peerPathRecord(uint64_t twoShotBytes, NanCheck nanCheck, long pid,
                                    size_t scheduleEntries);

struct PeerPathAgreement {
  std::pair<int, int> sameProcess{-1, -1};  // the first two ranks that are threads of one process
  int scheduleRank = -1;                    // the first rank with a fault schedule
};

// From every rank's record, in rank order: kInvalidArgument naming the setting and two ranks where
// RINGGUARD_PEER_TWO_SHOT_BYTES differs (ranks that differ would run different kernels for one call: every
// rank fails here naming two, instead of at its first collective with a fingerprint mismatch) or
// RINGGUARD_NAN_CHECK does (whether the path is made at all depends on it: ranks that differ fail here
// together, instead of some making windows the others never join). Records are a peer's bytes: a missing or
// malformed field is a value that differs, quoted as an excerpt; a missing schedule field reads as none.
// Otherwise the agreement, the same on every rank.
Status decidePeerPath(const std::vector<std::vector<uint8_t>>& records, PeerPathAgreement* out);

}  // namespace ringguard
