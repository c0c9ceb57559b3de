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

// eagerExchange's contract over the windows: out[p] is what this rank gives peer p (payloads that are the
// same bytes for every peer are published once), inBytes[p] what it takes from peer p; every rank's
// fingerprint is compared in the window (the same kFingerprintMismatch on every rank, naming the lowest
// rank and the lowest whose fingerprint differs from it); each chunk is checked as a ring slice (seq, step
// 0, slice = chunk, column = its publisher) after data-mode fault injection and re-read up to maxRetries
// times. A chunk corrupt on every read, or a peer's part of another size than inBytes says (all-to-all
// splits that do not match), is the same error on every rank (kCorruption, kInvalidArgument). OK once
// (*in)[p] holds peer p's payload intact, or, where into[p] is given (not null), that destination does
// (and (*in)[p] stays empty): the bytes are verified there, so on an error it may hold some of them.
//
// All-to-all, whose payload sizes no rank knows of the others: `offered` says whether this rank's payloads
// fit a half (runsOneSided); *taken comes back true when every rank's did and the payloads traveled, false
// when some rank's did not (then only the fingerprints were compared, and every rank takes the ring).
Status windowExchange(const CollectiveContext& ctx, const Fingerprint& mine,
                      const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                      std::vector<std::vector<uint8_t>>* in, const std::vector<uint8_t*>* into = nullptr,
                      bool offered = true, bool* taken = nullptr);

// How a small collective's payloads travel: through the windows, in the fingerprint frames (eager), or not
// as a small collective at all (the pipeline).
enum class SmallRoute { kPipeline, kWindow, kEager };

// The route of a collective whose largest payload from one rank to one peer is `maxPayload` and whose
// publication is `publishBytes`: the windows when runsOneSided, else eager when runsEager.
SmallRoute smallRoute(const CollectiveContext& ctx, const Executor& exec, size_t maxPayload,
                      size_t publishBytes);

// windowExchange or eagerExchange, by `route` (never kPipeline); `into` is for the windows only (the eager
// exchange fills `in`), so a caller copies what came in `in` and finds the rest in place.
Status smallExchange(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& mine,
                     const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                     std::vector<std::vector<uint8_t>>* in, const std::vector<uint8_t*>* into = nullptr);

// smallExchange where every rank gives every peer the same `bytes` at `data` (all-reduce, all-gather).
Status smallExchangeAll(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& mine,
                        const void* data, size_t bytes, std::vector<std::vector<uint8_t>>* in,
                        const std::vector<uint8_t*>* into = nullptr);

}  // namespace ringguard
