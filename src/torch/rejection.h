#pragma once
// What ProcessGroupRingguard::rejected (rejection.cc) needs to know about the call it handles: the depth of
// overrides on this thread (one override may call another: only the outermost enters a rejected call on
// the communicator) and whether the outermost one's call reached a communicator (then it was not rejected).

namespace ringguard {

// Held by every group collective's override for its whole body.
struct RejectionScope {
  RejectionScope();
  ~RejectionScope();
  RejectionScope(const RejectionScope&) = delete;
  RejectionScope& operator=(const RejectionScope&) = delete;
};

// launch() calls this right before it starts the collective: an exception from there on is the
// collective's, not a rejection of its arguments.
void markCollectiveStarted();

}  // namespace ringguard
