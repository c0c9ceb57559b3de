#pragma once
// What every collective needs besides its buffers: the transport, options, fault injector, counters,
// and the waiting discipline (deadline + peer errors) shared by all waits.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringguard/core/counters.h"
#include "ringguard/core/fault_injector.h"
#include "ringguard/core/fingerprint.h"
#include "ringguard/core/options.h"
#include "ringguard/core/repair.h"
#include "ringguard/transport/transport.h"

namespace ringguard {

struct CollectiveContext {
  Transport* transport = nullptr;
  const Options* options = nullptr;
  const FaultInjector* injector = nullptr;
  Counters* counters = nullptr;  // this collective adds to it
  uint64_t seq = 0;
  const char* name = "collective";
  const std::atomic<bool>* aborted = nullptr;  // set by Communicator::abort: every wait returns kAborted
};

// Polls `test` until it reports done. Fails with kTimeout ("... waiting for <what>") when nothing
// completes within the timeout, with kPeerError as soon as a peer broadcasts a fatal error, and with
// kAborted once the communicator is aborted.
Status pollUntil(const CollectiveContext& ctx, const std::function<Status(bool* done)>& test,
                 const std::function<std::string()>& what);

// Waits for one framed request.
Status waitFrame(const CollectiveContext& ctx, FrameRequest* req, const std::function<std::string()>& what);

// Sends `mine` to every peer and checks every peer's fingerprint against it (before any payload).
Status exchangeFingerprints(const CollectiveContext& ctx, const Fingerprint& mine);

// Sends this rank's failures of `round` to every peer and returns the canonical global list.
Status exchangeVerdicts(const CollectiveContext& ctx, int round, const std::vector<SliceFailure>& mine,
                        std::vector<SliceFailure>* global);

// Tells every peer about a fatal error (best effort) so they fail fast with the same cause.
void broadcastError(Transport* transport, const Status& error);

}  // namespace ringguard
