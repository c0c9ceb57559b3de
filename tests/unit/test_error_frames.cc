// Error frames carry the collective they end (issue 17): a rank that finished collective k and failed k + 1
// announces the error while a peer may still be in k; that peer must complete k (its data is good: the
// failed rank sent all of k) and fail k + 1, with the cause.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "algorithms/error_frames.h"
#include "loopback_util.h"

namespace ringguard {
namespace {

using Clock = std::chrono::steady_clock;

// A wait that completes after `ms` (long enough for pollUntil to look for peer errors several times).
std::function<Status(bool*)> doneAfter(int ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  return [until](bool* done) {
    *done = Clock::now() >= until;
    return Status::ok();
  };
}

std::function<std::string()> what(const char* w) {
  return [w] { return std::string(w); };
}

// Two loopback ranks; ctx is rank 0's, in collective 4, holding errors of later collectives when `hold`.
struct TwoRanks {
  explicit TwoRanks(bool hold) : t(makeLoopbackTransports(2)) {
    o.timeout = std::chrono::milliseconds(2000);
    o.logLevel = "off";
    ctx = testing::contextFor(t[0].get(), &o, &c, /*seq=*/4);
    if (hold) ctx.held = &held;
  }
  std::vector<std::unique_ptr<Transport>> t;
  Options o;
  Counters c;
  HeldErrors held;
  CollectiveContext ctx;
};

TEST(ErrorFrames, AnErrorOfALaterCollectiveWaitsForThatCollective) {
  TwoRanks g(/*hold=*/true);
  auto& t = g.t;
  CollectiveContext& ctx = g.ctx;
  // Rank 1 finished collective 4 and failed 5.
  broadcastError(t[1].get(), Status(StatusCode::kInvalidArgument, "allreduce seq 5: bad count"), 5);
  // Rank 0 is still in 4: its wait completes.
  Status st = pollUntil(ctx, doneAfter(20), what("the verdict of round 0 from rank 1"), 1);
  EXPECT_TRUE(st.isOk()) << st.toString();
  // In collective 5 the held error is the cause, at once (the wait would never complete).
  ctx.seq = 5;
  const auto start = Clock::now();
  st = pollUntil(ctx, doneAfter(1000000), what("the fingerprint summary from rank 1"), 1);
  EXPECT_EQ(st.code(), StatusCode::kPeerError) << st.toString();
  EXPECT_EQ(st.message(), "rank 1 reported: rank 1: InvalidArgument: allreduce seq 5: bad count");
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500));
}

TEST(ErrorFrames, AnErrorOfThisOrAnEarlierCollectiveOrOfNoneAppliesAtOnce) {
  for (uint64_t seq : {uint64_t(3), uint64_t(4), kNoCollective}) {
    TwoRanks g(/*hold=*/true);
    auto& t = g.t;
    const CollectiveContext& ctx = g.ctx;
    broadcastError(t[1].get(), Status(StatusCode::kAborted, "rank 1 aborted: test"), seq);
    Status st = pollUntil(ctx, doneAfter(1000000), what("slice 0 of step 0 from rank 1"), 1);
    EXPECT_EQ(st.code(), StatusCode::kPeerError) << "seq " << seq << ": " << st.toString();
    EXPECT_EQ(st.message(), "rank 1 reported: rank 1: Aborted: rank 1 aborted: test") << "seq " << seq;
  }
}

// Outside a communicator's collectives (handshake, point-to-point: no `held`) every error applies at once.
TEST(ErrorFrames, WithoutHeldErrorsEveryErrorAppliesAtOnce) {
  TwoRanks g(/*hold=*/false);
  auto& t = g.t;
  const CollectiveContext& ctx = g.ctx;
  broadcastError(t[1].get(), Status(StatusCode::kInternal, "boom"), 9);
  Status st = pollUntil(ctx, doneAfter(1000000), what("message 4 from rank 1"), 1);
  EXPECT_EQ(st.code(), StatusCode::kPeerError) << st.toString();
  EXPECT_EQ(st.message(), "rank 1 reported: rank 1: Internal: boom");
}

// A peer's error frame is bounds-checked before use: one too short, of an unknown kind, or naming a rank
// outside the group is a kTransportError naming the peer.
TEST(ErrorFrames, AMalformedErrorFrameIsRejectedNamingThePeer) {
  TwoRanks g(/*hold=*/false);
  auto& t = g.t;
  const CollectiveContext& ctx = g.ctx;
  ErrorFrameHeader h{};
  h.kind = 1;
  h.waitingOn = 7;  // not a rank of 2
  ASSERT_TRUE(t[1]->control()->send(0, ControlTag::kError, &h, sizeof(h)).isOk());
  ASSERT_TRUE(t[1]->control()->send(0, ControlTag::kError, "old", 3).isOk());
  PeerError e;
  bool got = false;
  Status st = takePeerError(ctx, &e, &got);
  EXPECT_EQ(st.code(), StatusCode::kTransportError);
  EXPECT_EQ(st.message(), "test seq 4: malformed error frame from rank 1 (32 bytes, kind 1, waiting on 7)");
  st = takePeerError(ctx, &e, &got);
  EXPECT_EQ(st.message(), "test seq 4: malformed error frame from rank 1 (3 bytes, kind 0, waiting on 0)");
}

}  // namespace
}  // namespace ringguard
