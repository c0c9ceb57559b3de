// The sealed control channel over the loopback transport: round trips, every kind of bad frame rejected
// with an error naming the peer and the cause, the control fault mode ending in the same error on every
// rank (never a hang), and the O(log N) control cost measured exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "loopback_util.h"
#include "ringguard/core/crc32.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::LoopbackGroup;
using testing::makeInput;

std::vector<uint8_t> bytesOf(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Takes what is pending from `peer` on `tag`, asserting that something is.
Status probeOnce(ControlChannel* c, int peer, ControlTag tag, std::vector<uint8_t>* msg, int* from) {
  bool got = false;
  Status st = c->probe(peer, tag, msg, from, &got);
  if (st.isOk() && !got) return Status(StatusCode::kInternal, "nothing arrived");
  return st;
}

TEST(ControlChannelTest, FramesArriveInOrderPerPeerAndTag) {
  std::shared_ptr<LoopbackFabric> fabric;
  auto t = makeLoopbackTransports(3, &fabric);
  ControlChannel* c0 = t[0]->control();
  ControlChannel* c2 = t[2]->control();
  Counters counters;
  ASSERT_TRUE(c0->send(2, ControlTag::kVerdict, "first", 5, &counters).isOk());
  ASSERT_TRUE(c0->send(2, ControlTag::kFingerprint, "other tag", 9, &counters).isOk());
  ASSERT_TRUE(c0->send(2, ControlTag::kVerdict, "second", 6, &counters).isOk());
  ASSERT_TRUE(t[1]->control()->send(2, ControlTag::kVerdict, "", 0).isOk());
  EXPECT_EQ(counters.controlFrames, 3u);
  EXPECT_EQ(counters.controlBytes, 3 * sizeof(ControlFrameHeader) + 5 + 9 + 6);

  std::vector<uint8_t> msg;
  int from = -1;
  ASSERT_TRUE(probeOnce(c2, 0, ControlTag::kVerdict, &msg, &from).isOk());
  EXPECT_EQ(msg, bytesOf("first"));
  EXPECT_EQ(from, 0);
  ASSERT_TRUE(probeOnce(c2, -1, ControlTag::kVerdict, &msg, &from).isOk());  // any peer: lowest first
  EXPECT_EQ(msg, bytesOf("second"));
  ASSERT_TRUE(probeOnce(c2, -1, ControlTag::kVerdict, &msg, &from).isOk());
  EXPECT_TRUE(msg.empty());
  EXPECT_EQ(from, 1);
  ASSERT_TRUE(probeOnce(c2, 0, ControlTag::kFingerprint, &msg, &from).isOk());
  EXPECT_EQ(msg, bytesOf("other tag"));
  bool got = true;
  ASSERT_TRUE(c2->probe(-1, ControlTag::kVerdict, &msg, &from, &got).isOk());
  EXPECT_FALSE(got);
  EXPECT_EQ(fabric->undeliveredControlFrames(), 0u);
  // A peer outside the group is the caller's mistake.
  EXPECT_EQ(c0->send(3, ControlTag::kError, "x", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c0->probe(3, ControlTag::kError, &msg, &from, &got).code(), StatusCode::kInvalidArgument);
}

// Re-seals a frame as a sender that knows the format would (a hostile or buggy peer, not a bad wire).
void reseal(std::vector<uint8_t>* frame, const std::function<void(ControlFrameHeader*)>& edit) {
  ControlFrameHeader h;
  std::memcpy(&h, frame->data(), sizeof(h));
  edit(&h);
  h.crc = crc32(frame->data() + sizeof(h), frame->size() - sizeof(h),
                crc32(&h, offsetof(ControlFrameHeader, crc)));
  std::memcpy(frame->data(), &h, sizeof(h));
}

Status firstRejection(const LoopbackFabric::ControlHook& hook) {
  std::shared_ptr<LoopbackFabric> fabric;
  auto t = makeLoopbackTransports(2, &fabric);
  fabric->setControlHook(hook);
  EXPECT_TRUE(t[1]->control()->send(0, ControlTag::kVerdict, "frame0", 6).isOk());
  EXPECT_TRUE(t[1]->control()->send(0, ControlTag::kVerdict, "frame1", 6).isOk());
  std::vector<uint8_t> msg;
  int from = -1;
  for (int i = 0; i < 2; ++i) {
    bool got = false;
    Status st = t[0]->control()->probe(1, ControlTag::kVerdict, &msg, &from, &got);
    if (!st.isOk()) return st;
    if (!got) return Status(StatusCode::kInternal, "frame " + std::to_string(i) + " never arrived");
    EXPECT_EQ(msg, bytesOf("frame" + std::to_string(i)));
  }
  return Status::ok();
}

TEST(ControlChannelTest, RejectsEveryKindOfBadFrameNamingPeerAndCause) {
  const std::string prefix = "control frame verdict #0 from rank 1 rejected on rank 0: ";
  const std::string prefix1 = "control frame verdict #1 from rank 1 rejected on rank 0: ";
  auto expect = [](const Status& st, const std::string& text) {
    EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
    EXPECT_EQ(st.message(), text);
  };
  EXPECT_TRUE(firstRejection(nullptr).isOk());
  // A wire that flips one bit of the body, or of the header.
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           (*f)[sizeof(ControlFrameHeader) + 2] ^= 0x10;
           return true;
         }),
         prefix + "CRC mismatch (damaged in transit)");
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           (*f)[offsetof(ControlFrameHeader, seq)] ^= 0x01;
           return true;
         }),
         prefix + "CRC mismatch (damaged in transit)");
  // Cut short, inside the header.
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           f->resize(10);
           return true;
         }),
         prefix + "truncated (10 bytes, a header has 32)");
  // Well sealed but wrong: a length that does not match, another format, misaddressed.
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           reseal(f, [](ControlFrameHeader* h) { h->length = 7; });
           return true;
         }),
         prefix + "length field says 7 bytes, 6 arrived");
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           reseal(f, [](ControlFrameHeader* h) { h->magic = 0x32434752; });
           return true;
         }),
         prefix + "not a control frame of this format (bad magic)");
  // Found by tests/fuzz/fuzz_control_frame.cc: a sealed frame with a non-zero reserved field was accepted.
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           reseal(f, [](ControlFrameHeader* h) { h->reserved = 4; });
           return true;
         }),
         prefix + "not a control frame of this format (reserved field 4, expected 0)");
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           reseal(f, [](ControlFrameHeader* h) { h->receiver = 1; });
           return true;
         }),
         prefix + "misaddressed (tag 2, rank 1 -> rank 1)");
  expect(firstRejection([](int, int, ControlTag, std::vector<uint8_t>* f) {
           reseal(f, [](ControlFrameHeader* h) { h->tag = uint16_t(ControlTag::kError); });
           return true;
         }),
         prefix + "misaddressed (tag 3, rank 1 -> rank 0)");
  // A lost frame: the next one is out of order.
  int sent = 0;
  expect(firstRejection([&sent](int, int, ControlTag, std::vector<uint8_t>*) { return sent++ != 0; }),
         prefix + "out of order: sequence number 1 arrived first (a frame was lost)");
  // A duplicated (replayed) frame: the first one again in place of the second.
  std::vector<uint8_t> firstFrame;
  expect(firstRejection([&firstFrame](int, int, ControlTag, std::vector<uint8_t>* f) {
           if (firstFrame.empty()) {
             firstFrame = *f;
           } else {
             *f = firstFrame;
           }
           return true;
         }),
         prefix1 + "stale or duplicated (sequence number 0)");
}

// The channel's checks without a channel (openControlFrame, what the fuzz target drives): a frame opens
// exactly when it is the one a sender of that (tag, sender, receiver, sequence number) seals.
TEST(ControlChannelTest, OpenControlFrameAcceptsExactlyTheSealedFrame) {
  const std::string body = "a verdict";
  const std::vector<uint8_t> frame =
      sealControlFrame(ControlTag::kVerdict, 2, 0, 5, body.data(), body.size());
  std::vector<uint8_t> msg;
  ASSERT_TRUE(openControlFrame(frame.data(), frame.size(), ControlTag::kVerdict, 2, 0, 5, &msg).isOk());
  EXPECT_EQ(msg, bytesOf(body));
  msg = {7};
  const Status st = openControlFrame(frame.data(), frame.size(), ControlTag::kVerdict, 2, 0, 6, &msg);
  EXPECT_EQ(
      st.message(),
      "control frame verdict #6 from rank 2 rejected on rank 0: stale or duplicated (sequence number 5)");
  EXPECT_EQ(msg, std::vector<uint8_t>{7});  // untouched on a rejection
  EXPECT_FALSE(openControlFrame(frame.data(), frame.size(), ControlTag::kError, 2, 0, 5, &msg).isOk());
  EXPECT_FALSE(openControlFrame(frame.data(), frame.size(), ControlTag::kVerdict, 1, 0, 5, &msg).isOk());
  EXPECT_FALSE(openControlFrame(frame.data(), frame.size(), ControlTag::kVerdict, 2, 1, 5, &msg).isOk());
  EXPECT_FALSE(openControlFrame(nullptr, 0, ControlTag::kVerdict, 2, 0, 5, &msg).isOk());
  std::vector<uint8_t> reserved = frame;
  reseal(&reserved, [](ControlFrameHeader* h) { h->reserved = 0x8000; });
  EXPECT_EQ(openControlFrame(reserved.data(), reserved.size(), ControlTag::kVerdict, 2, 0, 5, &msg).message(),
            "control frame verdict #5 from rank 2 rejected on rank 0: not a control frame of this format "
            "(reserved field 32768, expected 0)");
}

TEST(ControlChannelTest, RejectionAndInjectionAreCounted) {
  std::shared_ptr<LoopbackFabric> fabric;
  auto t = makeLoopbackTransports(2, &fabric);
  FaultOptions fo;
  fo.mode = FaultMode::kControl;
  fo.schedule = {{1, int(ControlTag::kVerdict), 1, 0}};  // frame #1 of verdicts 1 -> 0
  const FaultInjector injector(fo);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(t[1]->control()->send(0, ControlTag::kVerdict, "abc", 3).isOk());
  Counters c;
  std::vector<uint8_t> msg;
  int from = -1;
  bool got = false;
  ASSERT_TRUE(t[0]->control()->probe(1, ControlTag::kVerdict, &msg, &from, &got, &injector, &c).isOk());
  EXPECT_TRUE(got);
  EXPECT_EQ(c.injected, 0u);
  Status st = t[0]->control()->probe(1, ControlTag::kVerdict, &msg, &from, &got, &injector, &c);
  EXPECT_EQ(st.code(), StatusCode::kTransportError);
  EXPECT_NE(st.message().find("control frame verdict #1 from rank 1 rejected on rank 0"), std::string::npos)
      << st.message();
  EXPECT_EQ(c.injected, 1u);
  EXPECT_EQ(c.detected, 1u);
  EXPECT_EQ(c.escaped, 0u);
}

// ---- the control fault mode through the communicator ---------------------------------------------

struct RankOutcome {
  std::vector<Status> results;  // one per collective attempted
};

// Runs `collectives` allreduces of 1001 f32 on every rank; each result must be exact or an error, and
// once a rank has an error every later call returns it.
std::vector<RankOutcome> runAllreduces(LoopbackGroup& g, int collectives) {
  const size_t count = 1001;
  const std::vector<uint8_t> expected = expectedResult(DataType::kFloat32, ReduceOp::kSum, g.size(), count);
  std::vector<RankOutcome> out(size_t(g.size()));
  g.run([&](int rank, Communicator& c) {
    for (int i = 0; i < collectives; ++i) {
      std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, rank, count), res(in.size());
      Status st = c.allreduce(in.data(), res.data(), count, DataType::kFloat32, ReduceOp::kSum);
      if (st.isOk()) EXPECT_EQ(res, expected) << "rank " << rank << " collective " << i;
      out[size_t(rank)].results.push_back(st);
    }
  });
  return out;
}

Options controlFaults(std::vector<FaultScheduleEntry> schedule, double probability = 0.0) {
  Options o;
  o.sliceBytes = 256;
  o.timeout = std::chrono::milliseconds(20000);
  o.logLevel = "off";
  o.fault.mode = FaultMode::kControl;
  o.fault.schedule = std::move(schedule);
  o.fault.probability = probability;
  o.fault.seed = 11;
  return o;
}

// One damaged frame at a known place: the rank that received it fails with a kTransportError naming the
// sender and the cause, every other rank with a kPeerError carrying that text, and every later call
// returns the same error. A rank whose exchange was already complete when the frame was rejected keeps
// its (exact) result and fails at the next collective, which cannot finish without the failed rank.
void expectSameCauseEverywhere(int n, ControlTag tag, int sender, int receiver,
                               testing::Wire wire = testing::Wire::kLoopback) {
  LoopbackGroup g(n, controlFaults({{0, int(tag), sender, receiver}}), wire);
  const std::vector<RankOutcome> out = runAllreduces(g, 3);
  const std::string cause = std::string("control frame ") + controlTagName(tag) + " #0 from rank " +
                            std::to_string(sender) + " rejected on rank " + std::to_string(receiver) +
                            ": CRC mismatch (damaged in transit)";
  for (int r = 0; r < n; ++r) {
    const std::vector<Status>& res = out[size_t(r)].results;
    const size_t first = res[0].isOk() ? 1 : 0;
    if (r == receiver) EXPECT_EQ(first, 0u) << "the receiver fails the collective it detected the damage in";
    const Status& err = res[first];
    EXPECT_EQ(err.code(), r == receiver ? StatusCode::kTransportError : StatusCode::kPeerError)
        << "rank " << r << ": " << err.toString();
    EXPECT_NE(err.message().find(cause), std::string::npos) << "rank " << r << ": " << err.message();
    for (size_t i = first + 1; i < res.size(); ++i)
      EXPECT_EQ(res[i].toString(), err.toString()) << "poisoned";
  }
  const std::vector<Counters> c = g.counters();
  EXPECT_EQ(c[size_t(receiver)].injected, 1u);
  EXPECT_EQ(c[size_t(receiver)].detected, 1u);
  const Counters total = g.totalCounters();
  EXPECT_EQ(total.injected, 1u);
  EXPECT_EQ(total.detected, 1u);
  EXPECT_EQ(total.escaped, 0u);
  EXPECT_LE(total.collectives, uint64_t(n - 1));
}

TEST(ControlFaultTest, DamagedFingerprintFrameIsTheSameCauseOnEveryRank) {
  // Dissemination round 0: rank r hears from rank r - 1.
  expectSameCauseEverywhere(4, ControlTag::kFingerprint, 3, 0);
  expectSameCauseEverywhere(2, ControlTag::kFingerprint, 0, 1);
  // Round 1 of 5 ranks: rank 2 hears from rank 0.
  expectSameCauseEverywhere(5, ControlTag::kFingerprint, 0, 2);
}

TEST(ControlFaultTest, DamagedVerdictFrameIsTheSameCauseOnEveryRank) {
  expectSameCauseEverywhere(3, ControlTag::kVerdict, 1, 2);
  expectSameCauseEverywhere(8, ControlTag::kVerdict, 4, 0);  // round 2: distance 4
}

// The same over shared memory: the frames travel through its control rings, the damage is caught where it
// is on every transport (ControlChannel::probe).
TEST(ControlFaultTest, DamagedFramesOverSharedMemoryAreTheSameCauseOnEveryRank) {
  expectSameCauseEverywhere(2, ControlTag::kFingerprint, 0, 1, testing::Wire::kSharedMemory);
  expectSameCauseEverywhere(4, ControlTag::kFingerprint, 3, 0, testing::Wire::kSharedMemory);
  expectSameCauseEverywhere(3, ControlTag::kVerdict, 1, 2, testing::Wire::kSharedMemory);
}

// Random control damage: every collective is exact on a rank or an error there; once a rank fails it
// stays failed; no rank hangs; every error is about a rejected control frame; and a rank that fails at
// collective f takes every other rank down by collective f + 1 (each needs every rank's fingerprint).
TEST(ControlFaultTest, RandomDamageNeverGivesAWrongResultOrAHang) {
  const int reps = 12;
  uint64_t injected = 0;
  for (int n : {2, 3, 6}) {
    LoopbackGroup g(n, controlFaults({}, 0.05));
    const std::vector<RankOutcome> out = runAllreduces(g, reps);
    std::vector<int> firstError(size_t(n), reps);
    for (int r = 0; r < n; ++r) {
      const std::vector<Status>& res = out[size_t(r)].results;
      for (int i = 0; i < reps; ++i) {
        if (res[size_t(i)].isOk()) continue;
        if (firstError[size_t(r)] == reps) {
          firstError[size_t(r)] = i;
          EXPECT_NE(res[size_t(i)].message().find("rejected on rank"), std::string::npos)
              << res[size_t(i)].toString();
        }
        EXPECT_EQ(res[size_t(i)].toString(), res[size_t(firstError[size_t(r)])].toString()) << "poisoned";
      }
    }
    const int f = *std::min_element(firstError.begin(), firstError.end());
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(firstError[size_t(r)] <= f + 1 || f + 1 >= reps)
          << "n=" << n << ": rank " << r << " failed first at " << firstError[size_t(r)] << ", another at "
          << f;
    }
    const Counters total = g.totalCounters();
    EXPECT_EQ(total.escaped, 0u);
    EXPECT_EQ(total.detected, total.injected) << "n=" << n;
    const bool someFailed = f<reps, someInjected = total.injected> 0;
    EXPECT_EQ(someFailed, someInjected) << "n=" << n << ": a damaged frame always ends in an error";
    injected += total.injected;
  }
  EXPECT_GT(injected, 0u) << "the seed must damage something, or this test shows nothing";
}

// A rank that never shows up: only some ranks wait on it directly, the others on healthy ranks that wait
// on it. Every rank must still name the stalled rank, not the one it was relayed through.
TEST(DisseminationTest, AStalledRankIsNamedByEveryRank) {
  for (int n : {3, 4, 8}) {
    auto transports = makeLoopbackTransports(n);
    Options o;
    o.timeout =
        std::chrono::milliseconds(600);  // its grace (150 ms) lets every live rank report, even loaded
    o.logLevel = "off";
    const int stalled = n - 1;
    std::vector<Status> got{size_t(n - 1)};
    testing::runRanks(n - 1, [&](int r) {
      Counters c;
      const CollectiveContext ctx = testing::contextFor(transports[size_t(r)].get(), &o, &c);
      Status st = exchangeFingerprints(
          ctx, makeAllreduceFingerprint(ReduceOp::kSum, DataType::kFloat32, 8, IssueOrder{0}));
      if (!st.isOk() && st.code() != StatusCode::kPeerError) broadcastError(transports[size_t(r)].get(), st);
      got[size_t(r)] = st;
    });
    const std::string culprit = "rank " + std::to_string(stalled) + " stopped making progress";
    for (int r = 0; r < n - 1; ++r) {
      EXPECT_EQ(got[size_t(r)].code(), StatusCode::kTimeout) << got[size_t(r)].toString();
      EXPECT_NE(got[size_t(r)].message().find(culprit), std::string::npos)
          << "n=" << n << " rank " << r << ": " << got[size_t(r)].message();
    }
    // Rank 0 waits on it in round 0, with no slack: it is the one that times out.
    EXPECT_EQ(got[0].code(), StatusCode::kTimeout) << got[0].toString();
  }
}

// ---- control cost --------------------------------------------------------------------------------

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Fault-free: a fingerprint exchange and one verdict exchange, ceil(log2 N) frames each, per rank per
// collective (a dissemination; at N <= 3 one round to every peer, N - 1 = ceil(log2 N) frames); a
// collective with nothing to move (count 0) exchanges fingerprints only.
TEST(ControlCostTest, FramesPerCollectiveAreTwiceCeilLog2N) {
  for (int n = 1; n <= 8; ++n) {
    Options o;
    o.sliceBytes = 256;
    LoopbackGroup g(n, o);
    const int k = ceilLog2(n);
    const size_t count = 1001;
    const int reps = 3;
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, rank, count), res(in.size());
      for (int i = 0; i < reps; ++i) {
        ASSERT_TRUE(c.allreduce(in.data(), res.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
      }
    });
    // Fingerprint frame: header, dissemination header, two ranks and two 40-byte fingerprints; verdict
    // frame: header, dissemination header, an empty list.
    const uint64_t fpFrame = 32 + 16 + 8 + 2 * 40, verdictFrame = 32 + 16 + 8;
    for (const Counters& c : g.counters()) {
      EXPECT_EQ(c.controlFrames, uint64_t(reps * 2 * k)) << "n=" << n;
      EXPECT_EQ(c.controlBytes, uint64_t(reps * k) * (fpFrame + verdictFrame)) << "n=" << n;
    }
    const Counters before = g.comm(0).counters();
    g.run([&](int, Communicator& c) {
      ASSERT_TRUE(c.allreduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum).isOk());
    });
    EXPECT_EQ(g.comm(0).counters().since(before).controlFrames, uint64_t(k)) << "n=" << n;
    EXPECT_EQ(g.fabric().undeliveredControlFrames(), 0u) << "every frame sent was taken";
  }
}

// Rounds per exchange: one at N = 2 and 3 (every peer in one round), ceil(log2 N) from N = 4 on.
TEST(ControlCostTest, ExchangesAreOneRoundUpToThreeRanks) {
  for (int n = 1; n <= 9; ++n) {
    EXPECT_EQ(exchangeInOneRound(n), n == 2 || n == 3) << "n=" << n;
    EXPECT_EQ(exchangeRounds(n), n == 1 ? 0 : n <= 3 ? 1 : ceilLog2(n)) << "n=" << n;
  }
  // On the wire at N = 3: each rank sends one frame to each peer per exchange, all of exchange round 0
  // (the dissemination would send its frame to rank + 2 in round 1); at N = 4 rounds 0 and 1.
  for (int n : {3, 4}) {
    Options o;
    o.sliceBytes = 256;
    LoopbackGroup g(n, o);
    std::mutex mu;
    std::map<std::tuple<int, int, uint16_t>, std::vector<uint32_t>> rounds;  // (from, to, tag) -> k of each
    g.fabric().setControlHook([&](int from, int to, ControlTag tag, std::vector<uint8_t>* frame) {
      if (tag != ControlTag::kFingerprint && tag != ControlTag::kVerdict) return true;
      uint32_t k = 0;
      std::memcpy(&k, frame->data() + sizeof(ControlFrameHeader) + 12, 4);  // DisseminationHeader::k
      std::lock_guard<std::mutex> lock(mu);
      rounds[{from, to, uint16_t(tag)}].push_back(k);
      return true;
    });
    const size_t count = 1001;
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, rank, count), res(in.size());
      ASSERT_TRUE(c.allreduce(in.data(), res.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
    });
    for (int from = 0; from < n; ++from) {
      for (int to = 0; to < n; ++to) {
        for (ControlTag tag : {ControlTag::kFingerprint, ControlTag::kVerdict}) {
          const auto it = rounds.find({from, to, uint16_t(tag)});
          const int dist = (to - from + n) % n;
          std::vector<uint32_t> want;
          if (n == 3 && dist != 0) want = {0};
          if (n == 4 && dist == 1) want = {0};
          if (n == 4 && dist == 2) want = {1};
          EXPECT_EQ(it == rounds.end() ? std::vector<uint32_t>{} : it->second, want)
              << "n=" << n << " " << from << " -> " << to << " " << controlTagName(tag);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringguard
