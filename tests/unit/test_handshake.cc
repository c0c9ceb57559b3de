// The handshake at communicator creation, and peers that cannot be trusted: ranks with different settings
// or protocol versions get one error naming the setting and both values on every rank; a verdict entry a
// peer made up is rejected with a clear error instead of reaching the repair plan.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "loopback_util.h"
#include "runtime/handshake.h"

namespace ringguard {
namespace {

using testing::contextFor;
using testing::LoopbackGroup;
using testing::makeInput;
using testing::quietOptions;
using testing::runRanks;

// Every rank's first allreduce (and its communicator's firstError) after the handshake.
std::vector<Status> firstCalls(LoopbackGroup& g) {
  std::vector<Status> out(size_t(g.size()));
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, rank, 100), res(in.size());
    out[size_t(rank)] = c.allreduce(in.data(), res.data(), 100, DataType::kInt32, ReduceOp::kSum);
  });
  return out;
}

void expectEverywhere(LoopbackGroup& g, const std::string& message) {
  const std::vector<Status> got = firstCalls(g);
  for (int r = 0; r < g.size(); ++r) {
    EXPECT_EQ(got[size_t(r)].code(), StatusCode::kInvalidArgument) << "rank " << r;
    EXPECT_EQ(got[size_t(r)].message(), message) << "rank " << r;
    // Poisoned: every later call, and firstError, give the same error; nothing ran.
    EXPECT_EQ(g.comm(r).firstError().toString(), got[size_t(r)].toString());
    EXPECT_EQ(g.comm(r).counters().collectives, 0u);
  }
}

TEST(HandshakeTest, AgreeingRanksPassAndTransportDefaultsCount) {
  // Rank 0 leaves slice bytes and slots to the transport's defaults (1 MiB, 2): the same as rank 1's.
  std::vector<Options> o(2, quietOptions());
  o[1].sliceBytes = size_t(1) << 20;
  o[1].slots = 2;
  LoopbackGroup g(o);
  for (const Status& st : firstCalls(g)) EXPECT_TRUE(st.isOk()) << st.toString();
  LoopbackGroup one(1, quietOptions());
  for (const Status& st : firstCalls(one)) EXPECT_TRUE(st.isOk()) << st.toString();
}

TEST(HandshakeTest, EachSettingThatMustAgreeIsNamedWithBothValues) {
  const std::string prefix = "communicator settings disagree: ";
  {
    std::vector<Options> o(2, quietOptions());
    o[1].sliceBytes = 4096;
    LoopbackGroup g(o);
    expectEverywhere(g, prefix + "RINGGUARD_SLICE_BYTES differs: rank 0 has 1048576, rank 1 has 4096");
  }
  {
    std::vector<Options> o(3, quietOptions());
    o[2].slots = 4;
    LoopbackGroup g(o);
    expectEverywhere(g, prefix + "RINGGUARD_SLOTS differs: rank 0 has 2, rank 2 has 4");
  }
  {
    std::vector<Options> o(4, quietOptions());
    o[1].maxRetries = 5;
    LoopbackGroup g(o);
    expectEverywhere(g, prefix + "RINGGUARD_MAX_RETRIES differs: rank 0 has 3, rank 1 has 5");
  }
  {
    std::vector<Options> o(2, quietOptions());
    o[0].timeout = std::chrono::milliseconds(15000);
    LoopbackGroup g(o);
    expectEverywhere(g, prefix + "RINGGUARD_TIMEOUT_MS differs: rank 0 has 15000, rank 1 has 20000");
  }
  {
    // The lowest rank against the lowest rank that differs from it, whatever the others hold; the first
    // setting that differs between those two.
    std::vector<Options> o(7, quietOptions());
    o[5].sliceBytes = 512;
    o[5].maxRetries = 1;
    o[3].maxRetries = 2;
    o[6].slots = 8;
    LoopbackGroup g(o);
    expectEverywhere(g, prefix + "RINGGUARD_MAX_RETRIES differs: rank 0 has 3, rank 3 has 2");
  }
}

TEST(HandshakeTest, SimulatedVersionSkewIsNamed) {
  for (int n : {2, 5}) {
    auto transports = makeLoopbackTransports(n);
    const Options o = quietOptions();
    std::vector<Status> got{size_t(n)};
    runRanks(n, [&](int r) {
      got[size_t(r)] = handshake(transports[size_t(r)].get(), o, nullptr,
                                 r == n - 1 ? kProtocolVersion + 1 : kProtocolVersion);
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(got[size_t(r)].code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(got[size_t(r)].message(),
                "communicator settings disagree: ringguard protocol version differs: rank 0 has " +
                    std::to_string(kProtocolVersion) + ", rank " + std::to_string(n - 1) + " has " +
                    std::to_string(kProtocolVersion + 1))
          << "rank " << r;
    }
  }
}

TEST(HandshakeTest, AMissingPeerIsATimeoutNamingIt) {
  auto transports = makeLoopbackTransports(3);
  // Rank 2 never takes part: rank 0 hears from it in round 0, rank 1 in round 1. Rank 0 gives up first
  // and tells rank 1, which names rank 2 too instead of waiting out its own timeout (defect 6: the rank
  // that stopped, followed through the reports; stall_report.h).
  std::vector<Options> o(2, quietOptions());
  o[0].timeout = std::chrono::milliseconds(100);
  o[1].timeout = std::chrono::milliseconds(1000);
  std::vector<Status> got(2);
  runRanks(2, [&](int r) { got[size_t(r)] = handshake(transports[size_t(r)].get(), o[size_t(r)]); });
  EXPECT_EQ(got[0].code(), StatusCode::kTimeout) << got[0].toString();
  EXPECT_EQ(
      got[0].message(),
      "handshake seq 0: timed out after 100 ms on rank 0 waiting for the handshake summary from rank 2; "
      "rank 2 reported nothing within 25 ms: rank 2 stopped making progress");
  EXPECT_EQ(got[1].code(), StatusCode::kTimeout) << got[1].toString();
  EXPECT_NE(got[1].message().find("handshake seq 0: rank 1 was waiting "), std::string::npos)
      << got[1].message();
  EXPECT_NE(
      got[1].message().find(" ms for the handshake summary from rank 2 (told by rank 0, which was waiting "),
      std::string::npos)
      << got[1].message();
  EXPECT_NE(got[1].message().find("rank 2 reported nothing within 250 ms: rank 2 stopped making progress"),
            std::string::npos)
      << got[1].message();
}

// ---- verdict entries from untrusted peers ---------------------------------------------------------

// Runs exchangeVerdicts on n ranks where rank `liar` adds `bogus` to its own list (a peer's own list is
// never checked by itself: it is what the others receive). Errors are broadcast as the communicator does.
// `globals`, when given, receives every rank's global list.
std::vector<Status> exchangeWithLiar(int n, int liar, const SliceFailure& bogus, const RingSchedule& sched,
                                     bool withValidator,
                                     std::vector<std::vector<SliceFailure>>* globals = nullptr) {
  auto transports = makeLoopbackTransports(n);
  Options o = quietOptions();
  std::vector<Status> got{size_t(n)};
  std::vector<std::vector<SliceFailure>> all(static_cast<size_t>(n));
  runRanks(n, [&](int r) {
    Counters c;
    const CollectiveContext ctx = contextFor(transports[size_t(r)].get(), &o, &c, /*seq=*/4);
    std::vector<SliceFailure> mine, global;
    if (r == liar) mine.push_back(bogus);
    Status st =
        exchangeVerdicts(ctx, 0, mine, &global, withValidator ? ringFailureValidator(sched) : nullptr);
    if (!st.isOk() && st.code() != StatusCode::kPeerError) broadcastError(transports[size_t(r)].get(), st);
    got[size_t(r)] = st;
    all[size_t(r)] = std::move(global);
  });
  if (globals != nullptr) *globals = std::move(all);
  return got;
}

bool sameFailure(const SliceFailure& a, const SliceFailure& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// A rank that receives the forged entry rejects it itself: exactly `rejected` (a kTransportError). It may
// instead have learned the same rejection from another honest rank's broadcast first (a kPeerError
// carrying that text), when it waited long enough to look for peers' errors. Either way it fails and the
// error names the liar; it never merges the entry.
void expectRejected(const Status& st, const std::string& rejected, int r) {
  if (st.code() == StatusCode::kTransportError) {
    EXPECT_EQ(st.message(), rejected) << "rank " << r;
  } else {
    EXPECT_EQ(st.code(), StatusCode::kPeerError) << "rank " << r << ": " << st.toString();
    EXPECT_NE(st.message().find(rejected), std::string::npos) << "rank " << r << ": " << st.message();
  }
}

// Rank 1 puts an entry outside the schedule in its verdict. At N = 3 the exchange is one round: rank 1
// sends its list to ranks 0 and 2 directly, and each rejects it naming rank 1. At N = 5 it is a
// dissemination (rounds at distance 1, 2, 4): rank 1 sends to ranks 2, 3 and 0 directly, which reject it;
// rank 4 would only get it relayed (through rank 2, 3 or 0, which never relay what they rejected), so it
// fails with the rejecting peers' error; rank 1 waits for a message of rank 2's last round, which never
// comes, and learns the error too.
TEST(UntrustedPeerTest, OutOfRangeVerdictEntryIsRejectedWithAClearError) {
  for (int n : {3, 5}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const RingSchedule sched(n, 1001, 4, 256);
    std::ostringstream bounds;
    bounds << "outside the ring schedule (" << n << " columns, " << sched.slicesPerColumn() << " slices, "
           << sched.numSteps() << " steps)";
    if (n == 3) {
      ASSERT_EQ(sched.slicesPerColumn(), 6);
      ASSERT_EQ(bounds.str(), "outside the ring schedule (3 columns, 6 slices, 4 steps)");
    }
    SliceFailure f;
    f.column = 0;
    f.slice = 99;  // outside the schedule: the repair would index past the executor's trailers
    f.step = 0;
    f.sender = 0;
    f.receiver = 1;
    f.reason = uint8_t(SliceCheck::kCorrupt);
    ASSERT_GT(int(f.slice), sched.slicesPerColumn());
    const std::vector<Status> got = exchangeWithLiar(n, 1, f, sched, true);
    const std::string rejected =
        "test seq 4: verdict entry from rank 1 rejected (link 0 -> 1, step 0, slice 99, column 0): " +
        bounds.str();
    for (int r = 0; r < n; ++r) {
      if (r == 1) continue;
      expectRejected(got[size_t(r)], rejected, r);
    }
    if (n == 3) {
      // Rank 1 heard everything it needed (both peers sent their lists before merging its own): it ends
      // its part, or has already learned the rejection while it waited (and would fail at its next wait).
      EXPECT_TRUE(got[1].isOk() || (got[1].code() == StatusCode::kPeerError &&
                                    got[1].message().find(rejected) != std::string::npos))
          << got[1].toString();
    } else {
      // Rank 4 never receives rank 1's message directly: only the rejection can reach it.
      EXPECT_EQ(got[4].code(), StatusCode::kPeerError) << got[4].toString();
      EXPECT_EQ(got[1].code(), StatusCode::kPeerError) << got[1].toString();
      EXPECT_NE(got[1].message().find(rejected), std::string::npos) << got[1].message();
    }

    // A route that is not the schedule's (sender 2 does not send column 0 at step 0).
    f.slice = 1;
    f.sender = 2;
    const std::vector<Status> route = exchangeWithLiar(n, 1, f, sched, true);
    for (int r : {0, 2}) {
      expectRejected(
          route[size_t(r)],
          "test seq 4: verdict entry from rank 1 rejected (link 2 -> 1, step 0, slice 1, column 0): " +
              bounds.str(),
          r);
    }
    // The same entry with a correct route passes and every rank holds it, and only it.
    f.sender = 0;
    std::vector<std::vector<SliceFailure>> globals;
    const std::vector<Status> ok = exchangeWithLiar(n, 1, f, sched, true, &globals);
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(ok[size_t(r)].isOk()) << "rank " << r << ": " << ok[size_t(r)].toString();
      ASSERT_EQ(globals[size_t(r)].size(), 1u) << "rank " << r;
      EXPECT_TRUE(sameFailure(globals[size_t(r)][0], f)) << "rank " << r;
    }
  }
}

TEST(UntrustedPeerTest, RanksAndReasonsAreCheckedWithoutASchedule) {
  const RingSchedule sched(2, 100, 4, 256);
  SliceFailure f;
  f.sender = 7;  // no such rank
  f.receiver = 0;
  f.reason = uint8_t(SliceCheck::kCorrupt);
  std::vector<Status> got = exchangeWithLiar(2, 1, f, sched, false);
  EXPECT_EQ(got[0].message(),
            "test seq 4: verdict entry from rank 1 rejected (link 7 -> 0, step 0, slice 0, column 0): ranks "
            "outside [0, 2)");
  f.sender = 1;
  f.reason = uint8_t(SliceCheck::kPoisoned);  // not a link failure: never repaired
  got = exchangeWithLiar(2, 1, f, sched, false);
  EXPECT_EQ(
      got[0].message(),
      "test seq 4: verdict entry from rank 1 rejected (link 1 -> 0, step 0, slice 0, column 0): reason 5 is "
      "not a link failure");
  // Rank 1 heard all it needed from rank 0 before that: it ends its part (and would fail at its next wait).
  EXPECT_TRUE(got[1].isOk()) << got[1].toString();
}

// Through the communicator: rank 1's verdict frames are forged (well sealed, so the channel accepts
// them) with an entry outside the schedule. Every rank fails with a clear error naming rank 1 as the
// sender of the entry; nothing is written out of bounds. At N = 3 (one round) ranks 0 and 2 receive the
// entry from rank 1 and reject it; rank 1 may complete its first allreduce (every verdict it received was
// honest, its result exact), and then fails its next call with the peers' error. At N = 5 (a dissemination)
// rank 4 gets no frame of rank 1 in the exchange and rank 1 waits on rank 2's last round: every rank fails
// the first call.
TEST(UntrustedPeerTest, ForgedVerdictThroughTheCommunicatorFailsCleanly) {
  const std::string rejected = "verdict entry from rank 1 rejected (link 0 -> 1, step 0, slice 1000000";
  for (int n : {3, 5}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Options o = quietOptions();
    o.sliceBytes = 256;
    LoopbackGroup g(n, o);
    g.fabric().setControlHook([](int from, int, ControlTag tag, std::vector<uint8_t>* frame) {
      if (from != 1 || tag != ControlTag::kVerdict) return true;
      // Body: dissemination header (16 bytes), count, pad, entries. Append one entry and re-seal.
      SliceFailure f;
      f.column = 0;
      f.slice = 1000000;
      f.step = 0;
      f.sender = 0;
      f.receiver = 1;
      f.reason = uint8_t(SliceCheck::kCorrupt);
      testing::appendVerdictEntry(frame, 16, f);
      return true;
    });
    const std::vector<Status> got = firstCalls(g);
    for (int r = 0; r < n; ++r) {
      if (r == 1 && n == 3 && got[1].isOk()) continue;
      EXPECT_FALSE(got[size_t(r)].isOk()) << "rank " << r;
      EXPECT_NE(got[size_t(r)].message().find(rejected), std::string::npos)
          << "rank " << r << ": " << got[size_t(r)].toString();
    }
    for (int r : {0, 2}) {  // they received rank 1's frame themselves (or the other's rejection first)
      EXPECT_TRUE(got[size_t(r)].code() == StatusCode::kTransportError ||
                  got[size_t(r)].code() == StatusCode::kPeerError)
          << "rank " << r << ": " << got[size_t(r)].toString();
    }
    if (n == 5) EXPECT_EQ(got[4].code(), StatusCode::kPeerError) << got[4].toString();
    // The next call fails on every rank with the same rejection (the communicator is poisoned, or, on a
    // rank that completed, the peers' broadcast reaches its next wait).
    const std::vector<Status> next = firstCalls(g);
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(next[size_t(r)].isOk()) << "rank " << r;
      EXPECT_NE(next[size_t(r)].message().find(rejected), std::string::npos)
          << "rank " << r << ": " << next[size_t(r)].toString();
      EXPECT_NE(g.comm(r).firstError().message().find(rejected), std::string::npos)
          << "rank " << r << ": " << g.comm(r).firstError().toString();
    }
  }
}

}  // namespace
}  // namespace ringguard
