#pragma once
// The one-sided protocol on host shared memory (docs/design/protocol.md, "The one-sided protocol on host
// shared memory"): a small or medium group collective whose transport has windows (transport/window.h)
// publishes its payloads into its own window with a CRC per chunk and reads every peer's, verifying each
// chunk as a ring slice and re-reading it when it fails. The fingerprint travels in the window too, so a
// fault-free collective sends no control frame: the waits are on flags a peer stores, acknowledgements
// included. windowExchange has eagerExchange's contract (eager.h), so a collective builds its result the
// same way from either; smallExchange picks between them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/agreement.h"
#include "algorithms/eager.h"
#include "core/fingerprint.h"
#include "executor/executor.h"

namespace ringguard {

// Whether a collective that publishes `publishBytes` in all (the sum of its distinct payloads) takes the
// one-sided protocol: host memory, a transport with windows, and a publication that fits one half. Every
// input is agreed (the fingerprint's kind, dtype and count; the window size, compared when the shared
// memory was set up), so ranks whose fingerprints agree choose alike.
bool runsOneSided(const CollectiveContext& ctx, const Executor& exec, size_t publishBytes);

// Where a window exchange leaves what it reads (copies by default, into (*in)[p]).
struct WindowReads {
  // Peer p's payload copied to into[p] where that is not null, else into (*in)[p].
  const std::vector<uint8_t*>* into = nullptr;
  // Or not copied at all (into is then not used): peer p's payload is verified where it lies, in p's window,
  // and (*at)[p] points at it; p leaves it untouched until this rank's next collective on the windows (the
  // settle: docs/design/protocol.md, "Read once"). Where a read damaged by fault injection passed its check,
  // (*at)[p] points at that read, kept in (*in)[p], as the other paths use what passed. For reductions,
  // which read each payload once, in place.
  std::vector<const uint8_t*>* at = nullptr;
  // The chunks' trailer step (and fault-injection key): 0, or 1 for a collective's second exchange in one
  // call (the two-shot all-reduce's reduced shares), so the two are told apart.
  uint32_t step = 0;
};

// eagerExchange's contract over the windows: out[p] is what this rank gives peer p (payloads that are the
// same bytes for every peer are published once), inBytes[p] what it takes from peer p (where `reads`
// says); every rank's
// fingerprint is compared in the window (the same kFingerprintMismatch on every rank, naming the lowest
// rank and the lowest whose fingerprint differs from it); each chunk is checked as a ring slice (seq, step
// reads.step, slice = chunk, column = its publisher) after data-mode fault injection and re-read up to
// maxRetries times. A chunk corrupt on every read, or a peer's part of another size than inBytes says
// (all-to-all splits that do not match), is the same error on every rank (kCorruption, kInvalidArgument).
// OK once every peer's payload is intact where `reads` puts it (a destination into[p] is verified in place,
// so on an error it may hold some of the bytes).
//
// All-to-all, whose payload sizes no rank knows of the others: `offered` says whether this rank's payloads
// fit a half (runsOneSided); *taken comes back true when every rank's did and the payloads traveled, false
// when some rank's did not (then only the fingerprints were compared, and every rank takes the ring).
Status windowExchange(const CollectiveContext& ctx, const Fingerprint& mine,
                      const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                      std::vector<std::vector<uint8_t>>* in, const WindowReads& reads = {},
                      bool offered = true, bool* taken = nullptr);

// Whether an all-reduce of `bytes` over `ranks` that runs on the windows takes the two-shot (each rank
// reduces a column and publishes it: allreduce.cc) rather than the one-shot (each rank reduces everything
// from every peer): where reading 2 (N - 1) / N of the payload from peers instead of N - 1 pays for the
// second exchange. At 2 ranks both read one payload's worth, and the two-shot measured level at 32-64 KiB
// and slower at 128 KiB; at 3 ranks it won from 64 KiB (docs/PERFORMANCE.md, issue 45). The size is in the
// fingerprint and the group's size is agreed, so every rank of a collective chooses alike.
inline constexpr size_t kWindowTwoShotBytes = size_t(64) << 10;
inline constexpr int kWindowTwoShotRanks = 3;
inline bool windowAllreduceTwoShot(int ranks, size_t bytes) {
  return ranks >= kWindowTwoShotRanks && bytes >= kWindowTwoShotBytes;
}

// How a small collective's payloads travel: through the windows, in the fingerprint frames (eager), or not
// as a small collective at all (the pipeline).
enum class SmallRoute { kPipeline, kWindow, kEager };

// The route of a collective whose largest payload from one rank to one peer is `maxPayload` and whose
// publication is `publishBytes`: the windows when runsOneSided, else eager when runsEager.
SmallRoute smallRoute(const CollectiveContext& ctx, const Executor& exec, size_t maxPayload,
                      size_t publishBytes);

// windowExchange or eagerExchange, by `route` (never kPipeline). reads.into is for the windows only (the
// eager exchange fills `in`), so a caller copies what came in `in` and finds the rest in place; reads.at is
// filled on either route ((*in)[p]'s bytes after an eager exchange).
Status smallExchange(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& mine,
                     const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                     std::vector<std::vector<uint8_t>>* in, const WindowReads& reads = {});

// smallExchange where every rank gives every peer the same `bytes` at `data` (all-reduce, all-gather).
Status smallExchangeAll(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& mine,
                        const void* data, size_t bytes, std::vector<std::vector<uint8_t>>* in,
                        const WindowReads& reads = {});

}  // namespace ringguard
