#pragma once
// Waits on flags a peer stores in its window (transport/window.h): the one-sided protocol's collectives
// (window_exchange.cc) and send/recv (window_sendrecv.cc).
#include <chrono>
#include <thread>

#include "algorithms/agreement.h"

namespace ringguard {

// Polls of a flag between two looks at the clock.
inline constexpr int kInlinePolls = 64;

// Waits for `ready()`: polls the flag alone for as long as the transport's waits poll before they sleep
// (pollBeforeBlocking: 50 us under mpirun, where each rank owns its core; a few polls under torch), yielding
// the core between rounds of polls (ranks that share cores, as 3 under mpirun on 2 do, would otherwise spin
// out their time slice while the peer they wait for waits for the core: 4 KiB all-reduce at 3 ranks on 2
// cores 120-130 us against 13 us yielding, docs/PERFORMANCE.md; with a core each the yield returns at once),
// then through pollUntil (its deadline, peers' errors, abort, the doorbell). The flag alone is a load of a
// line the peer writes; pollUntil's rounds also move the transport's rings under its lock and read the clock,
// which cost more than a small collective's data (docs/PERFORMANCE.md, issue 45). `slow` (optional) is
// asked on every round of pollUntil: an error from it ends the wait.
// No `slow` question (the default of waitUntil).
struct NoSlowQuestion {
  Status operator()() const { return Status::ok(); }
};

template <typename Ready, typename What, typename Slow = NoSlowQuestion>
Status waitUntil(const CollectiveContext& ctx, const Ready& ready, const What& what, int peer,
                 const Slow& slow = Slow()) {
  // The fast path is flag loads only: the clock, the wait's description and pollUntil's std::functions come
  // after the first polls fail.
  for (int i = 0; i < kInlinePolls; ++i) {
    if (ready()) return Status::ok();
  }
  const auto budget = ctx.transport->pollBeforeBlocking();
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < budget &&
         !(ctx.aborted != nullptr && ctx.aborted->load(std::memory_order_relaxed))) {
    for (int i = 0; i < kInlinePolls; ++i) {
      if (ready()) return Status::ok();
    }
    std::this_thread::yield();
  }
  return pollUntil(
      ctx,
      [&ready, &slow](bool* done) {
        *done = ready();
        return *done ? Status::ok() : slow();
      },
      what, peer);
}

}  // namespace ringguard
