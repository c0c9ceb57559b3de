// PeerLanes over the loopback transport: one-direction messages (c10d's isend / irecv) issued without
// waiting, in the patterns a single progress thread would deadlock on, with exact payloads, mismatches
// that fail both sides, fault injection repaired bit-identically, and abort.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "loopback_util.h"
#include "runtime/handshake.h"
#include "runtime/peer_lanes.h"
#include "transport/loopback/loopback_transport.h"

namespace ringguard {
namespace {

using testing::runRanks;

// A message's bytes: a function of sender, receiver, message number and index, never all zero.
uint8_t pattern(int from, int to, int message, size_t i) {
  return uint8_t(1 + (from * 37 + to * 11 + message * 5 + int(i % 251)) % 255);
}

std::vector<uint8_t> payload(int from, int to, int message, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = pattern(from, to, message, i);
  return v;
}

// The Status a message completed with, once it did.
struct Pending {
  std::promise<Status> promise;
  std::future<Status> future = promise.get_future();
  PeerLanes::Done done() {
    return [this](const Status& st) { promise.set_value(st); };
  }
  Status wait() {
    if (future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      return Status(StatusCode::kTimeout, "test: the message never completed");
    }
    return future.get();
  }
};

Options laneOptions(size_t sliceBytes = 4096) {
  Options o;
  o.sliceBytes = sliceBytes;
  o.timeout = std::chrono::milliseconds(10000);
  return o;
}

// One Options per rank. Wire::kWindows: shared memory with windows, where a message that fits a slot
// travels in it (window_sendrecv.h) and a receive from any source looks there too.
std::vector<std::unique_ptr<PeerLanes>> makeLanes(const std::vector<Options>& options,
                                                  testing::Wire wire = testing::Wire::kLoopback) {
  std::vector<std::unique_ptr<PeerLanes>> lanes;
  auto transports = makeLoopbackTransports(int(options.size()));
  if (wire == testing::Wire::kWindows)
    testing::wrapInSharedMemory(&transports, testing::kTestRingBytes, testing::kTestWindowBytes);
  for (size_t r = 0; r < options.size(); ++r)
    lanes.push_back(std::make_unique<PeerLanes>(std::move(transports[r]), options[r]));
  return lanes;
}

std::vector<std::unique_ptr<PeerLanes>> makeLanes(int n, const Options& options,
                                                  testing::Wire wire = testing::Wire::kLoopback) {
  return makeLanes(std::vector<Options>(size_t(n), options), wire);
}

constexpr testing::Wire kWires[] = {testing::Wire::kLoopback, testing::Wire::kWindows};

class PeerLanesRing : public ::testing::TestWithParam<int> {};

// Every rank posts its receive from the left before its send to the right, and waits only then: on one
// progress thread every rank would sit in its receive. Several rounds, sizes across slice boundaries.
TEST_P(PeerLanesRing, ReceiveBeforeSendCompletes) {
  const int n = GetParam();
  auto lanes = makeLanes(n, laneOptions());
  const size_t sizes[] = {0, 1, 4095, 4096, 4097, 3 * 4096 + 17};
  runRanks(n, [&](int r) {
    const int left = (r - 1 + n) % n, right = (r + 1) % n;
    for (int m = 0; m < int(std::size(sizes)); ++m) {
      const size_t bytes = sizes[m];
      std::vector<uint8_t> out = payload(r, right, m, bytes), in(bytes, 0);
      Pending recv, send;
      lanes[size_t(r)]->recv(left, /*tag=*/m, in.data(), bytes, DataType::kUint8, recv.done());
      lanes[size_t(r)]->send(right, /*tag=*/m, out.data(), bytes, DataType::kUint8, send.done());
      Status rs = recv.wait(), ss = send.wait();
      ASSERT_TRUE(rs.isOk()) << rs.toString();
      ASSERT_TRUE(ss.isOk()) << ss.toString();
      ASSERT_EQ(in, payload(left, r, m, bytes)) << "rank " << r << " message " << m;
    }
  });
  for (auto& l : lanes) EXPECT_EQ(l->counters().collectives, 2 * std::size(sizes));
}

INSTANTIATE_TEST_SUITE_P(Ranks, PeerLanesRing, ::testing::Values(2, 3, 5));

// Messages of one (peer, direction) match in issue order; both directions run at once, and a rank's sends
// to different peers do not wait for each other.
TEST(PeerLanes, MessagesMatchInOrderPerDirection) {
  const int n = 3, messages = 12;
  auto lanes = makeLanes(n, laneOptions(1024));
  runRanks(n, [&](int r) {
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<std::unique_ptr<Pending>> pending;
    std::vector<std::pair<int, int>> expect;  // (from, message) of each receive
    for (int m = 0; m < messages; ++m) {
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        const size_t bytes = size_t(100 * m + 7);
        out.push_back(payload(r, p, m, bytes));
        in.emplace_back(bytes, 0);
        expect.emplace_back(p, m);
        pending.push_back(std::make_unique<Pending>());
        lanes[size_t(r)]->send(p, 0, out.back().data(), bytes, DataType::kUint8, pending.back()->done());
        pending.push_back(std::make_unique<Pending>());
        lanes[size_t(r)]->recv(p, 0, in.back().data(), bytes, DataType::kUint8, pending.back()->done());
      }
    }
    for (auto& p : pending) {
      Status st = p->wait();
      ASSERT_TRUE(st.isOk()) << st.toString();
    }
    for (size_t k = 0; k < in.size(); ++k) {
      EXPECT_EQ(in[k], payload(expect[k].first, r, expect[k].second, in[k].size()))
          << "rank " << r << " #" << k;
    }
  });
}

// What the two ends disagree on fails both, at once (not at the timeout), naming both values.
void expectMismatchFailsBothSides(testing::Wire wire, size_t sendCount, int sendTag, size_t recvCount,
                                  int recvTag, const std::string& sent, const std::string& expected) {
  SCOPED_TRACE(testing::wireName(wire));
  auto lanes = makeLanes(2, laneOptions(), wire);
  std::vector<float> out(sendCount, 1.0f), in(recvCount, 0.0f);
  Pending send, recv;
  const auto start = std::chrono::steady_clock::now();
  lanes[0]->send(1, sendTag, out.data(), sendCount, DataType::kFloat32, send.done());
  lanes[1]->recv(0, recvTag, in.data(), recvCount, DataType::kFloat32, recv.done());
  Status rs = recv.wait(), ss = send.wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(rs.code(), StatusCode::kInvalidArgument) << rs.toString();
  EXPECT_NE(rs.message().find(sent), std::string::npos) << rs.toString();
  EXPECT_NE(rs.message().find(expected), std::string::npos) << rs.toString();
  EXPECT_EQ(ss.code(), StatusCode::kPeerError) << ss.toString();
  EXPECT_NE(ss.message().find("rank 1 reported"), std::string::npos) << ss.toString();
  // Both sides stay failed: a later message gets the same error.
  Pending later;
  lanes[0]->send(1, 0, out.data(), 1, DataType::kFloat32, later.done());
  EXPECT_EQ(later.wait().code(), StatusCode::kPeerError);
}

TEST(PeerLanes, CountMismatchFailsBothSides) {
  for (testing::Wire wire : kWires) expectMismatchFailsBothSides(wire, 5, 0, 4, 0, "count=5", "count=4");
  // In the windows: a slot's message where a larger one is expected, and the reverse.
  const size_t large = testing::kTestWindowBytes / 4;
  expectMismatchFailsBothSides(testing::Wire::kWindows, 5, 0, large, 0, "count=5",
                               "count=" + std::to_string(large));
  expectMismatchFailsBothSides(testing::Wire::kWindows, large, 0, 5, 0, "count=" + std::to_string(large),
                               "count=5");
}

TEST(PeerLanes, TagMismatchFailsBothSides) {
  for (testing::Wire wire : kWires) expectMismatchFailsBothSides(wire, 4, 7, 4, 8, "tag=7", "tag=8");
}

// Ranks whose settings differ fail their first message with each other on both sides, before any payload
// (a receive posted for another slice size would overflow, and Gloo aborts the process on it), with one
// error naming the setting and both values; a third rank waiting on one of them learns it at once.
TEST(PeerLanes, SettingsThatDisagreeFailBothSidesBeforeAnyPayload) {
  std::vector<Options> o(3, laneOptions(4096));
  o[1].sliceBytes = 1024;
  auto lanes = makeLanes(o);
  const size_t bytes = 50000;
  std::vector<uint8_t> out = payload(0, 1, 0, bytes), in(bytes, 0), third(16, 0);
  Pending send, recv, waiting;
  const auto start = std::chrono::steady_clock::now();
  lanes[2]->recv(0, 0, third.data(), third.size(), DataType::kUint8, waiting.done());
  lanes[0]->send(1, 0, out.data(), bytes, DataType::kUint8, send.done());
  lanes[1]->recv(0, 0, in.data(), bytes, DataType::kUint8, recv.done());
  const Status ss = send.wait(), rs = recv.wait(), ws = waiting.wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const std::string says =
      "point-to-point settings disagree: RINGGUARD_SLICE_BYTES differs: rank 0 has 4096, "
      "rank 1 has 1024";
  for (const Status& st : {ss, rs}) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_EQ(st.message(), says);
  }
  EXPECT_EQ(in, std::vector<uint8_t>(bytes, 0));  // nothing was written
  EXPECT_EQ(ws.code(), StatusCode::kPeerError) << ws.toString();
  EXPECT_NE(ws.message().find(says), std::string::npos) << ws.toString();
  for (auto& l : lanes) EXPECT_EQ(l->counters().collectives, 0u);
}

// Ranks of two builds: the protocol version is what they are told, on both sides.
TEST(PeerLanes, HandshakeNamesAVersionSkewOnBothSides) {
  auto transports = makeLoopbackTransports(2);
  const Options o = laneOptions();
  std::vector<Status> got(2);
  runRanks(2, [&](int r) {
    got[size_t(r)] = peerHandshake(transports[size_t(r)].get(), 1 - r, o, nullptr,
                                   r == 0 ? kProtocolVersion + 1 : kProtocolVersion);
  });
  for (const Status& st : got) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(),
              "point-to-point settings disagree: ringguard protocol version differs: rank 0 has " +
                  std::to_string(kProtocolVersion + 1) + ", rank 1 has " + std::to_string(kProtocolVersion));
  }
}

// Corrupted slices are detected and resent; the payload arrives bit-identical.
TEST(PeerLanes, FaultsAreRepairedBitIdentically) {
  for (testing::Wire wire : kWires) {
    SCOPED_TRACE(testing::wireName(wire));
    Options o = laneOptions(1024);
    o.fault.probability = 0.3;
    o.fault.seed = 11;
    auto lanes = makeLanes(2, o, wire);
    const size_t bytes = 64 * 1024;
    runRanks(2, [&](int r) {
      const int peer = 1 - r;
      for (int m = 0; m < 4; ++m) {
        std::vector<uint8_t> out = payload(r, peer, m, bytes), in(bytes, 0);
        Pending recv, send;
        lanes[size_t(r)]->recv(peer, 0, in.data(), bytes, DataType::kUint8, recv.done());
        lanes[size_t(r)]->send(peer, 0, out.data(), bytes, DataType::kUint8, send.done());
        Status rs = recv.wait(), ss = send.wait();
        ASSERT_TRUE(rs.isOk()) << rs.toString();
        ASSERT_TRUE(ss.isOk()) << ss.toString();
        ASSERT_EQ(in, payload(peer, r, m, bytes));
      }
    });
    Counters total = lanes[0]->counters();
    total += lanes[1]->counters();
    EXPECT_GT(total.injected, 0u);
    EXPECT_EQ(total.detected, total.injected);
    EXPECT_EQ(total.retransmitted, total.injected);
    EXPECT_EQ(total.escaped, 0u);
  }
}

TEST(PeerLanes, BadArgumentsCompleteAtOnceNamingThem) {
  auto lanes = makeLanes(2, laneOptions());
  float x = 0;
  struct Case {
    int peer, tag;
    const void* data;
    const char* says;
  } cases[] = {{0, 0, &x, "must be another rank"},
               {2, 0, &x, "must be another rank"},
               {-1, 0, &x, "must be another rank"},
               {1, -3, &x, "tag -3 is negative"},
               {1, 0, nullptr, "send"}};
  for (const Case& c : cases) {
    Pending p;
    lanes[0]->send(c.peer, c.tag, c.data, 1, DataType::kFloat32, p.done());
    ASSERT_EQ(p.future.wait_for(std::chrono::seconds(0)), std::future_status::ready) << c.says;
    Status st = p.future.get();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.toString();
    EXPECT_NE(st.message().find("send on rank 0"), std::string::npos) << st.toString();
  }
  EXPECT_TRUE(lanes[0]->firstError().isOk());  // a refused call poisons nothing
}

// abort(): the receive waiting for a message that never comes ends with kAborted, queued ones too, and
// the peer learns it instead of timing out.
TEST(PeerLanes, AbortEndsWaitsAndTellsThePeer) {
  auto lanes = makeLanes(2, laneOptions());
  std::vector<uint8_t> a(16), b(16);
  Pending first, queued, peer;
  lanes[0]->recv(1, 0, a.data(), a.size(), DataType::kUint8, first.done());
  lanes[0]->recv(1, 0, b.data(), b.size(), DataType::kUint8, queued.done());
  lanes[1]->recv(0, 0, b.data(), b.size(), DataType::kUint8, peer.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  lanes[0]->abort("test");
  EXPECT_EQ(first.wait().code(), StatusCode::kAborted);
  EXPECT_EQ(queued.wait().code(), StatusCode::kAborted);
  Status ps = peer.wait();
  EXPECT_EQ(ps.code(), StatusCode::kPeerError) << ps.toString();
  EXPECT_NE(ps.message().find("aborted: test"), std::string::npos) << ps.toString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// ---- receives from any source (PeerLanes::recvAny) ----------------------------------------------------

// What a receive from any source completed with, once it did.
struct PendingFrom {
  std::promise<std::pair<Status, int>> promise;
  std::future<std::pair<Status, int>> future = promise.get_future();
  PeerLanes::DoneFrom done() {
    return [this](const Status& st, int source) { promise.set_value({st, source}); };
  }
  std::pair<Status, int> wait() {
    if (future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      return {Status(StatusCode::kTimeout, "test: the receive never completed"), -1};
    }
    return future.get();
  }
};

// Every rank but 0 sends `messages` messages of `bytes` (payload(r, 0, m, bytes)) to rank 0, which receives
// them from any source: each sender's arrive whole, in the order it sent them.
void expectEveryMessageReceivedFromAnySource(std::vector<std::unique_ptr<PeerLanes>>& lanes, int n,
                                             size_t bytes, int messages) {
  std::vector<std::vector<std::vector<uint8_t>>> got(static_cast<size_t>(n));  // by sender, in arrival order
  runRanks(n, [&](int r) {
    if (r != 0) {
      for (int m = 0; m < messages; ++m) {
        std::vector<uint8_t> out = payload(r, 0, m, bytes);
        Pending send;
        lanes[size_t(r)]->send(0, 0, out.data(), bytes, DataType::kUint8, send.done());
        Status st = send.wait();
        ASSERT_TRUE(st.isOk()) << st.toString();
      }
      return;
    }
    for (int k = 0; k < messages * (n - 1); ++k) {
      std::vector<uint8_t> in(bytes, 0);
      PendingFrom recv;
      lanes[0]->recvAny(0, in.data(), bytes, DataType::kUint8, recv.done());
      auto [st, source] = recv.wait();
      ASSERT_TRUE(st.isOk()) << st.toString();
      ASSERT_TRUE(source >= 1 && source < n) << source;
      got[size_t(source)].push_back(in);
    }
  });
  for (int s = 1; s < n; ++s) {
    ASSERT_EQ(got[size_t(s)].size(), size_t(messages)) << "sender " << s;
    for (int m = 0; m < messages; ++m)
      EXPECT_EQ(got[size_t(s)][size_t(m)], payload(s, 0, m, bytes)) << s << " message " << m;
  }
}

class PeerLanesAnySource : public ::testing::TestWithParam<std::tuple<int, size_t, testing::Wire>> {};

// Every other rank sends rank 0 several messages, each waiting for the last; rank 0 receives them all
// without naming a source. Each receive names its sender, and each sender's messages arrive whole and in
// order. Sizes: empty, one frame, several slices (the pipeline).
TEST_P(PeerLanesAnySource, LearnsTheSenderAndKeepsEachSendersOrder) {
  const int n = std::get<0>(GetParam());
  const size_t bytes = std::get<1>(GetParam());
  const int messages = 3;
  auto lanes = makeLanes(n, laneOptions(1024), std::get<2>(GetParam()));
  expectEveryMessageReceivedFromAnySource(lanes, n, bytes, messages);
  EXPECT_EQ(lanes[0]->counters().collectives, uint64_t(messages * (n - 1)));
}

// In the windows, 70000 bytes do not fit a slot: those senders' messages come as frames.
INSTANTIATE_TEST_SUITE_P(RanksAndBytes, PeerLanesAnySource,
                         ::testing::Combine(::testing::Values(2, 3, 5), ::testing::Values(0, 17, 5000, 70000),
                                            ::testing::ValuesIn(kWires)));

// The matching rule: a receive named for a peer, issued first, takes that peer's next message; among the
// peers whose messages are waiting, the lowest rank's is taken first, then the next.
TEST(PeerLanes, AnySourceMatchesInIssueOrderThenLowestRank) {
  for (testing::Wire wire : kWires) {
    SCOPED_TRACE(testing::wireName(wire));
    const int n = 4;
    auto lanes = makeLanes(n, laneOptions(), wire);
    // The pairs' settings checks first (a named message each), so that later messages go out at once.
    runRanks(n, [&](int r) {
      uint8_t b = 0;
      Pending p;
      if (r == 0) {
        for (int s = 1; s < n; ++s) {
          Pending q;
          lanes[0]->recv(s, 0, &b, 1, DataType::kUint8, q.done());
          ASSERT_TRUE(q.wait().isOk());
        }
      } else {
        lanes[size_t(r)]->send(0, 0, &b, 1, DataType::kUint8, p.done());
        ASSERT_TRUE(p.wait().isOk());
      }
    });
    // Ranks 3, 2, 1 each send one message (rank 3 two), in that order; all are waiting when rank 0 receives.
    std::vector<std::vector<uint8_t>> out;
    std::vector<std::unique_ptr<Pending>> sends;
    for (int s : {3, 3, 2, 1}) {
      out.push_back(payload(s, 0, int(out.size()), 40));
      sends.push_back(std::make_unique<Pending>());
      lanes[size_t(s)]->send(0, 0, out.back().data(), 40, DataType::kUint8, sends.back()->done());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::vector<std::vector<uint8_t>> in(4, std::vector<uint8_t>(40, 0));
    Pending named;
    lanes[0]->recv(3, 0, in[0].data(), 40, DataType::kUint8, named.done());  // issued first: rank 3's first
    std::vector<int> sources;
    for (int k = 1; k < 4; ++k) {
      PendingFrom any;
      lanes[0]->recvAny(0, in[size_t(k)].data(), 40, DataType::kUint8, any.done());
      auto [st, source] = any.wait();
      ASSERT_TRUE(st.isOk()) << st.toString();
      sources.push_back(source);
    }
    ASSERT_TRUE(named.wait().isOk());
    EXPECT_EQ(sources, (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(in[0], out[0]);  // rank 3's first message
    EXPECT_EQ(in[1], out[3]);  // rank 1's
    EXPECT_EQ(in[2], out[2]);  // rank 2's
    EXPECT_EQ(in[3], out[1]);  // rank 3's second
    for (auto& p : sends) EXPECT_TRUE(p->wait().isOk());
  }
}

// A count that differs from the sender's fails both sides at once naming both, as a named receive does.
TEST(PeerLanes, AnySourceCountMismatchFailsBothSides) {
  for (testing::Wire wire : kWires) {
    SCOPED_TRACE(testing::wireName(wire));
    auto lanes = makeLanes(3, laneOptions(), wire);
    std::vector<float> out(5, 1.0f), in(4, 0.0f);
    Pending send;
    PendingFrom recv;
    const auto start = std::chrono::steady_clock::now();
    lanes[2]->send(0, 0, out.data(), out.size(), DataType::kFloat32, send.done());
    lanes[0]->recvAny(0, in.data(), in.size(), DataType::kFloat32, recv.done());
    auto [rs, source] = recv.wait();
    Status ss = send.wait();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(source, -1);
    EXPECT_EQ(rs.code(), StatusCode::kInvalidArgument) << rs.toString();
    EXPECT_NE(rs.message().find("count=5"), std::string::npos) << rs.toString();
    EXPECT_NE(rs.message().find("count=4"), std::string::npos) << rs.toString();
    EXPECT_EQ(ss.code(), StatusCode::kPeerError) << ss.toString();
  }
}

// Corrupted slices of messages received from any source are detected and resent, as for named receives.
TEST(PeerLanes, AnySourceFaultsAreRepairedBitIdentically) {
  Options o = laneOptions(1024);
  o.fault.probability = 0.3;
  o.fault.seed = 5;
  for (testing::Wire wire : kWires) {
    SCOPED_TRACE(testing::wireName(wire));
    const int n = 3;
    // In a slot a message is one slice: more messages give the injector as many chances.
    const int messages = wire == testing::Wire::kWindows ? 8 : 1;
    auto lanes = makeLanes(n, o, wire);
    const size_t bytes = 16 * 1024;
    expectEveryMessageReceivedFromAnySource(lanes, n, bytes, messages);
    Counters total;
    for (auto& l : lanes) total += l->counters();
    EXPECT_GT(total.injected, 0u);
    EXPECT_EQ(total.detected, total.injected);
    EXPECT_EQ(total.escaped, 0u);
  }
}

// No sender: the receive ends at the timeout saying so (not naming one rank as stopped), and abort() ends
// one at once.
TEST(PeerLanes, AnySourceTimesOutAndAborts) {
  Options o = laneOptions();
  o.timeout = std::chrono::milliseconds(300);
  auto lanes = makeLanes(2, o);
  uint8_t b[4];
  PendingFrom lonely;
  lanes[0]->recvAny(3, b, 4, DataType::kUint8, lonely.done());
  auto [st, source] = lonely.wait();
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_NE(st.message().find("no message from any rank within 300 ms (recv without a source, tag 3)"),
            std::string::npos)
      << st.toString();
  auto fresh = makeLanes(2, laneOptions());
  PendingFrom waiting;
  fresh[0]->recvAny(0, b, 4, DataType::kUint8, waiting.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  fresh[0]->abort("test");
  EXPECT_EQ(waiting.wait().first.code(), StatusCode::kAborted);
  // One rank alone has no one to receive from.
  auto one = makeLanes(1, laneOptions());
  PendingFrom alone;
  one[0]->recvAny(0, b, 4, DataType::kUint8, alone.done());
  EXPECT_EQ(alone.wait().first.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringguard
