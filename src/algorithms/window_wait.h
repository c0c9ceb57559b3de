#pragma once
// Waits on flags a peer stores in its window (transport/window.h): the one-sided protocol's collectives
// (window_exchange.cc) and send/recv (window_sendrecv.cc).
#include <chrono>
#include <thread>

#include "algorithms/agreement.h"
#include "transport/window.h"

namespace ringguard {

// Polls of a flag between two looks at the clock.
inline constexpr int kInlinePolls = 64;

// How long a wait polls before its first yield where every rank has a core of its own: a yield is a system
// call of about 0.5 us on the 2-core dev machine even when nothing else is runnable, about what a whole
// 4 KiB collective costs, and a peer that runs on its own core stores the flag within a microsecond or two.
// Short, so that ranks the scheduler put on one core (another job holding the other) lose little before
// they yield (waiting out the whole polling time there made calls 66-134 us; docs/PERFORMANCE.md,
// "Thirtieth session").
inline constexpr std::chrono::microseconds kPollBeforeYield{5};

// Waits for `ready()`: polls the flag alone for as long as the transport's waits poll before they sleep
// (pollBeforeBlocking: 50 us under mpirun, where each rank owns its core; a few polls under torch), yielding
// the core between rounds of polls (ranks that share cores, as 3 under mpirun on 2 do, would otherwise spin
// out their time slice while the peer they wait for waits for the core: 4 KiB all-reduce at 3 ranks on 2
// cores 120-130 us against 13 us yielding, docs/PERFORMANCE.md; with a core each the first yield comes after
// kPollBeforeYield),
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
  const Windows* w = ctx.transport->windows();
  const auto firstYield =
      w != nullptr && w->coreForEachRank() ? kPollBeforeYield : std::chrono::microseconds(0);
  while (true) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= budget || (ctx.aborted != nullptr && ctx.aborted->load(std::memory_order_relaxed))) break;
    for (int i = 0; i < kInlinePolls; ++i) {
      if (ready()) return Status::ok();
    }
    if (waited >= firstYield) std::this_thread::yield();
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
