// The completion lane's refusal after the group stopped names what stopped it (issue 17, defect 7): a call
// that races abort() past process_group.cc's own check used to read "after shutdown()".
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "torch/completion.h"

namespace ringguard {
namespace {

std::string refusal(CompletionLane& lane) {
  try {
    lane.push(std::make_shared<PendingCollective>());
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(CompletionLane, APushAfterAbortSaysAbort) {
  CompletionLane lane("rg-test");
  lane.drain("abort()");
  EXPECT_EQ(refusal(lane), "ringguard: a collective was issued after abort()");
  lane.drain("shutdown()");  // idempotent: the first stop is what stopped it
  EXPECT_EQ(refusal(lane), "ringguard: a collective was issued after abort()");
}

TEST(CompletionLane, APushAfterShutdownSaysShutdown) {
  CompletionLane lane("rg-test");
  lane.drain();
  EXPECT_EQ(refusal(lane), "ringguard: a collective was issued after shutdown()");
}

}  // namespace
}  // namespace ringguard
