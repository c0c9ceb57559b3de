// Small send/recv in one message (docs/design/protocol.md, "Small collectives in one round"), over the
// loopback transport: exact results with one message and one verdict per flow, small and large directions
// in one call, every fault mode repaired with detected == injected, a damaged message repaired, persistent
// damage the same error on both ends, a small and a large count a mismatch naming both, and a hostile
// receiver's verdict rejected.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/eager.h"
#include "core/repair.h"
#include "core/trailer.h"
#include "loopback_util.h"
#include "transport/loopback/loopback_transport.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;

Options defaults() {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// A pattern no two (rank, element) pairs share, so a payload from the wrong rank or place shows.
std::vector<uint8_t> pattern(int rank, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = uint8_t((i * 131 + size_t(rank) * 17 + i / 256) & 0xFF);
  return v;
}

// Every rank sends counts[r] bytes (u8) to its right and receives its left's in one call; checks the result.
void ringShift(LoopbackGroup& g, const std::vector<size_t>& counts) {
  const int n = g.size();
  g.run([&](int rank, Communicator& c) {
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    const std::vector<uint8_t> in = pattern(rank, counts[size_t(rank)]);
    std::vector<uint8_t> out(counts[size_t(left)] + 1, 0xAB);
    Status st =
        c.sendRecvAsync(in.data(), in.size(), right, out.data(), counts[size_t(left)], left, DataType::kUint8)
            ->wait();
    ASSERT_TRUE(st.isOk()) << "rank " << rank << ": " << st.toString();
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end() - 1), pattern(left, counts[size_t(left)]))
        << "rank " << rank;
    EXPECT_EQ(out.back(), 0xAB) << "rank " << rank;
  });
}

TEST(EagerSendRecv, EveryDtypeOneMessageAndOneVerdictPerFlow) {
  for (int n : {2, 3, 4}) {  // only the two ends of a flow talk: no limit on N
    LoopbackGroup g(n, defaults());
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64, DataType::kFloat8E4M3,
                       DataType::kBool, DataType::kComplex128}) {
      for (size_t count : {size_t(1), size_t(3), size_t(100)}) {
        const size_t bytes = count * dataTypeSize(t);
        const Counters before = g.totalCounters();
        g.run([&](int rank, Communicator& c) {
          const int right = (rank + 1) % n, left = (rank + n - 1) % n;
          const std::vector<uint8_t> in = pattern(rank, bytes);
          std::vector<uint8_t> out(bytes, 0);
          Status st = c.sendRecvAsync(in.data(), count, right, out.data(), count, left, t)->wait();
          ASSERT_TRUE(st.isOk()) << st.toString();
          EXPECT_EQ(out, pattern(left, bytes)) << dataTypeName(t) << " count " << count << " rank " << rank;
        });
        // Per flow: the message (fingerprint, header, trailer, payload: the payload crosses as control
        // bytes) and the receiver's verdict; one slice each.
        const Counters d = g.totalCounters().since(before);
        EXPECT_EQ(d.controlFrames, uint64_t(2 * n)) << dataTypeName(t) << " count " << count << " np" << n;
        EXPECT_GE(d.controlBytes,
                  uint64_t(n) * (sizeof(Fingerprint) + sizeof(EagerHeader) + sizeof(Trailer) + bytes));
        EXPECT_EQ(d.slicesSent, uint64_t(n));
        EXPECT_EQ(d.slicesVerified, uint64_t(n));
        EXPECT_EQ(d.bytesSent, uint64_t(n) * bytes);
        EXPECT_EQ(d.repairRounds, 0u);
      }
    }
  }
}

// The loopback's limit is 16 KiB: the flows that exceed it take the pipeline, the others one message, on
// ranks that do both in one call (and on separate sends and receives).
TEST(EagerSendRecv, SmallAndLargeDirectionsInOneCall) {
  const size_t small = 1000, large = 100000;
  LoopbackGroup g(3, defaults());
  for (const std::vector<size_t>& counts :
       {std::vector<size_t>{small, large, small}, std::vector<size_t>{large, small, large},
        std::vector<size_t>{small, small, large}}) {
    ringShift(g, counts);
  }
  LoopbackGroup pair(2, defaults());
  ringShift(pair, {small, large});
  ringShift(pair, {large, small});
}

class EagerSendRecvFaults : public ::testing::TestWithParam<FaultMode> {};

// In the fingerprint frames, and in the windows' slots (window_sendrecv.h: a failed read is re-read from
// the slot, no repair round).
TEST_P(EagerSendRecvFaults, EveryModeRepairedBitIdentical) {
  for (testing::Wire wire : {testing::Wire::kLoopback, testing::Wire::kWindows}) {
    for (int n : {2, 3}) {
      Options o = defaults();
      o.maxRetries = 4;
      o.fault.mode = GetParam();
      o.fault.probability = 0.3;
      o.fault.seed = 7;
      o.fault.delayMs = 1;
      LoopbackGroup g(n, o, wire);
      for (int i = 0; i < 12; ++i) ringShift(g, std::vector<size_t>(size_t(n), size_t(333 + i)));
      const std::string where = std::string(testing::wireName(wire)) + " np" + std::to_string(n);
      const Counters c = g.totalCounters();
      if (wire == testing::Wire::kLoopback) {
        testing::expectEveryInjectionRepaired(c, GetParam(), where);
        continue;
      }
      EXPECT_EQ(c.escaped, 0u) << where;
      EXPECT_EQ(c.controlFrames, 0u) << where;
      if (GetParam() == FaultMode::kDelay) {
        EXPECT_GT(c.delayed, 0u) << where;
        continue;
      }
      EXPECT_GT(c.injected, 0u) << where;
      EXPECT_EQ(c.detected, c.injected) << where;
      EXPECT_EQ(c.retransmitted, c.injected) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EagerSendRecvFaults, testing::payloadFaultModes(),
                         testing::faultModeParamName);

// The message is a control frame: damage to it (the control fault mode) is a link failure, repaired.
// In the windows the same damage hits the slot's sealed fingerprint, which is read again.
TEST(EagerSendRecvFaults, ADamagedMessageIsRepaired) {
  for (testing::Wire wire : {testing::Wire::kLoopback, testing::Wire::kWindows}) {
    Options o = defaults();
    o.fault.mode = FaultMode::kControl;
    o.fault.schedule = {{1, int(ControlTag::kFingerprint), 0, 1}};  // the second message 0 -> 1
    LoopbackGroup g(2, o, wire);
    for (int i = 0; i < 3; ++i) ringShift(g, {200, 300});
    const Counters c = g.totalCounters();
    EXPECT_EQ(c.injected, 1u) << testing::wireName(wire);
    EXPECT_EQ(c.detected, 1u) << testing::wireName(wire);
    EXPECT_EQ(c.retransmitted, 1u) << testing::wireName(wire);
    // Both ends of the flow in a repair round; none in the windows.
    EXPECT_EQ(c.repairRounds, wire == testing::Wire::kWindows ? 0u : 2u) << testing::wireName(wire);
  }
}

// Damage on every attempt: both ends return the same kCorruption naming the link.
// In the windows too: the receiver's failed read is in its acknowledgement, which the sender returns.
TEST(EagerSendRecvFaults, PersistentDamageIsTheSameErrorOnBothEnds) {
  for (testing::Wire wire : {testing::Wire::kLoopback, testing::Wire::kWindows}) {
    Options o = defaults();
    o.maxRetries = 2;
    o.logLevel = "off";
    o.fault.schedule = {FaultScheduleEntry{0, 0, 0, 1}};  // message 0, step 0, slice 0, into rank 1
    o.fault.repeat = 10;
    LoopbackGroup g(2, o, wire);
    std::vector<Status> results(2);
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> buf(64, uint8_t(rank));
      results[size_t(rank)] =
          rank == 0 ? c.sendRecvAsync(buf.data(), 64, 1, nullptr, 0, -1, DataType::kUint8)->wait()
                    : c.sendRecvAsync(nullptr, 0, -1, buf.data(), 64, 0, DataType::kUint8)->wait();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(results[size_t(r)].code(), StatusCode::kCorruption) << results[size_t(r)].toString();
      EXPECT_EQ(results[size_t(r)].message(),
                "sendrecv seq 0: slice still failing verification after 2 retransmission(s): link 0 -> 1, "
                "step 0, slice 0, column 0: payload CRC mismatch")
          << testing::wireName(wire) << " rank " << r;
    }
  }
}

// A small count on one end (one message) and a large one on the other (the pipeline): the receiver reads
// the fingerprint first and names both counts; the sender hears of it.
// In the windows the small end's message is in its slot (window_sendrecv.h) and the large end's in frames:
// the receive takes either, so the two still meet.
TEST(EagerSendRecvErrors, ASmallAndALargeCountAreAMismatchNamingBoth) {
  for (auto [wire, smallSender] :
       {std::pair{testing::Wire::kLoopback, true}, std::pair{testing::Wire::kLoopback, false},
        std::pair{testing::Wire::kWindows, true}, std::pair{testing::Wire::kWindows, false}}) {
    Options o = defaults();
    o.logLevel = "off";
    LoopbackGroup g(2, o, wire);
    std::vector<Status> results(2);
    const size_t sendCount = smallSender ? 10 : 100000, recvCount = smallSender ? 100000 : 10;
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> buf(100000);
      results[size_t(rank)] =
          rank == 0 ? c.sendRecvAsync(buf.data(), sendCount, 1, nullptr, 0, -1, DataType::kUint8)->wait()
                    : c.sendRecvAsync(nullptr, 0, -1, buf.data(), recvCount, 0, DataType::kUint8)->wait();
    });
    const std::string want =
        "sendrecv mismatch: rank 0 sends {sendrecv dtype=u8 count=" + std::to_string(sendCount) +
        " tag=0 seq=0}, rank 1 expects {sendrecv dtype=u8 count=" + std::to_string(recvCount) +
        " tag=0 seq=0}";
    EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument) << results[1].toString();
    EXPECT_NE(results[1].message().find(want), std::string::npos) << results[1].message();
    EXPECT_EQ(results[0].code(), StatusCode::kPeerError) << results[0].toString();
    EXPECT_NE(results[0].message().find(want), std::string::npos) << results[0].message();
  }
}

// A hostile receiver: its verdict (well sealed) names a slice the message does not have. The sender
// rejects it naming the peer and the entry instead of resending something else.
TEST(EagerSendRecvErrors, AVerdictEntryOutsideTheMessageIsRejected) {
  Options o = defaults();
  o.logLevel = "off";
  LoopbackGroup g(2, o);
  g.fabric().setControlHook([](int from, int, ControlTag tag, std::vector<uint8_t>* frame) {
    if (from != 1 || tag != ControlTag::kVerdict) return true;
    SliceFailure f;
    f.column = 0;
    f.slice = 7;  // the message is slice 0
    f.sender = 0;
    f.receiver = 1;
    f.reason = uint8_t(SliceCheck::kCorrupt);
    testing::appendVerdictEntry(frame, 12, f);  // body: {seq, round, count}, then the entries
    return true;
  });
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> buf(400);
    results[size_t(rank)] =
        rank == 0 ? c.sendRecvAsync(buf.data(), 100, 1, nullptr, 0, -1, DataType::kFloat32)->wait()
                  : c.sendRecvAsync(nullptr, 0, -1, buf.data(), 100, 0, DataType::kFloat32)->wait();
  });
  EXPECT_EQ(results[0].code(), StatusCode::kTransportError) << results[0].toString();
  EXPECT_EQ(
      results[0].message(),
      "sendrecv seq 0: verdict entry from rank 1 rejected: link 0 -> 1, step 0, slice 7, column 0: payload "
      "CRC mismatch is not this message's payload");
}

}  // namespace
}  // namespace ringguard
