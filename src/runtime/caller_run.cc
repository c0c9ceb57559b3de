// A synchronous call runs on its caller at once when the communicator is idle (docs/design/protocol.md,
// "Threading"). The queue exists to order collectives and to let the Async forms return
// before they run; a caller that waits for its own collective, with nothing ahead of it, needs neither.
// Claiming the runner (busy_) under the same lock that the queue is pushed under makes the claim a place
// in the one order of the communicator's collectives: an Async call issued after it queues behind it, and
// one issued before it (still queued, or running) sends this call to the queue.
#include <memory>
#include <mutex>

#include "core/trace_events.h"
#include "runtime/communicator_impl.h"

namespace ringguard {

bool Communicator::Impl::runOnCaller(const Call& call, Status* out) {
  if (!callerRuns_) return false;
  std::shared_ptr<const FaultInjector> injector;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // abort() sets firstError_ before anything else, so a failed or aborted communicator answers here as
    // the queue's enqueue does, with nothing run and nothing announced.
    if (!firstError_.isOk()) {
      *out = firstError_;
    } else {
      if (busy_ || !queue_.empty()) return false;
      busy_ = true;
      injector = injector_;
    }
  }
  // The enqueue instant, marked direct: the timeline keeps one per call (docs/GUIDE.md).
  trace::instant(trace::Kind::kEnqueue, call.name, track_, 0, /*a (direct)=*/1, 0, 0, 0, nullptr, call.bytes);
  if (!injector) return true;  // the first error
  // Released on every way out: a runner left claimed would stop this communicator for good.
  struct Release {
    Impl* impl;
    ~Release() { impl->finishRun(); }
  } release{this};
  *out = runCollective(call, injector.get());
  return true;
}

}  // namespace ringguard
