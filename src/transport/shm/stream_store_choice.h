#pragma once
// Whether copies into the windows should use non-temporal stores on this host (core/stream_copy.h), measured
// once when a group's shared memory is set up (docs/design/protocol.md, "Shared-memory transport"). Ordinary
// stores into lines the reading core still holds wait for each line's copy there to be invalidated;
// non-temporal stores do not, but leave the reader to load the bytes from memory. Which costs less differs
// between machines: on the AMD EPYC VM of the twenty-ninth session a 64 KiB round trip took 9.9 us with
// ordinary stores against 6.1 us streaming (the default since), on the Intel Xeon VM of the forty-eighth
// session streaming made a 64 KiB all-reduce at 2 ranks 0.99-1.04x MPI against 1.56-1.58x with ordinary
// stores (docs/PERFORMANCE.md, issue 45). So ranks 0 and 1 time the round trip both ways and rank 0 decides
// for the group.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ringguard {
namespace shm {

struct StreamStoreCost {
  double ordinaryUs = 0;   // median round trip: kStreamProbeBytes written with ordinary stores, read back
  double streamingUs = 0;  // the same written with non-temporal stores
};

inline constexpr size_t kStreamProbeBytes = size_t(64) << 10;
// Bytes the measurement uses at the start of each of the two ranks' areas: a flag line, then (rank 0's)
// the payload.
inline constexpr size_t kStreamProbeAreaBytes = 64 + kStreamProbeBytes;

// Run by rank 0 (`writer`) and rank 1 at once, over an area of kStreamProbeAreaBytes in each one's window
// (zero, unused yet): rank 0 writes the payload into its area and raises its flag, rank 1 copies it out and
// answers in its own area's flag, 8 unmeasured and 31 measured times with each kind of store. Rank 0 gets the
// medians, rank 1 zeros. Either gives up (zeros) when the other has not moved for `patience` (`firstWait`
// for its first move), and rank 1 when rank 0's flag says something other than the next of those 78 rounds:
// each side is done within firstWait + 78 x patience whatever the other does, and nothing rank 0 writes sizes
// a read.
StreamStoreCost measureStreamStores(bool writer, uint8_t* writerArea, uint8_t* readerArea,
                                    std::chrono::milliseconds firstWait, std::chrono::milliseconds patience);

// Streaming is taken only where it saved at least a tenth of the round trip.
inline constexpr double kStreamingWinRatio = 0.9;
inline bool streamStoresPay(const StreamStoreCost& c) {
  return c.ordinaryUs > 0 && c.streamingUs > 0 && c.streamingUs < kStreamingWinRatio * c.ordinaryUs;
}

}  // namespace shm
}  // namespace ringguard
