// Grouped send/recv (Communicator::sendRecvGroupAsync) over loopback, shared memory and its windows: rings
// listed send-first on some ranks and receive-first on others, both directions at once, pipelines with
// one-sided ends, a dtype per direction, messages to this rank itself, several messages to one peer in order;
// a count mismatch failing both ends naming both counts, a dtype of the same size failing both ends, bad ops
// refused before anything is issued; and faults repaired exactly (detected == injected).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loopback_util.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;
using testing::makeInput;
using testing::Wire;

Options smallSlices(size_t sliceBytes = 64) {
  Options o;
  o.sliceBytes = sliceBytes;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// What rank `source` sends as its `message`-th message: distinct per source, message and dtype.
std::vector<uint8_t> pattern(DataType t, int source, int message, size_t count) {
  return makeInput(t, ReduceOp::kSum, source * 7 + message * 3 + 1, count);
}

// The dtype rank r sends in: three of different sizes, so a ring of 3 or more has rounds whose two
// directions differ and (at 4) one whose two agree.
DataType sendType(int r) {
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64};
  return types[r % 3];
}

P2pOp sendOp(int peer, std::vector<uint8_t>& buf, size_t count, DataType t) {
  return P2pOp{P2pOp::Kind::kSend, peer, buf.data(), count, t};
}
P2pOp recvOp(int peer, std::vector<uint8_t>& buf, size_t count, DataType t) {
  return P2pOp{P2pOp::Kind::kRecv, peer, buf.data(), count, t};
}

class LoopbackP2pGroup : public ::testing::TestWithParam<std::tuple<Wire, int>> {
 protected:
  Wire wire() const { return std::get<0>(GetParam()); }
  int ranks() const { return std::get<1>(GetParam()); }
};

TEST_P(LoopbackP2pGroup, RingsBothWaysAndPipelinesExact) {
  const int n = ranks();
  LoopbackGroup g(n, smallSlices(), wire());
  // 30000 elements pass a window slot (testing::kTestWindowBytes): the two-sided path, in the same groups.
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(301), size_t(30000)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    // Ring: send right, receive left; even ranks list the send first, odd ones the receive.
    g.run([&](int rank, Communicator& c) {
      const int right = (rank + 1) % n, left = (rank + n - 1) % n;
      const DataType st = sendType(rank), rt = sendType(left);
      std::vector<uint8_t> in = pattern(st, rank, 0, count), out(count * dataTypeSize(rt) + 1, 0xAB);
      std::vector<P2pOp> ops = {sendOp(right, in, count, st), recvOp(left, out, count, rt)};
      if (rank % 2 == 1) std::swap(ops[0], ops[1]);
      const Status s = c.sendRecvGroupAsync(ops)->wait();
      ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.toString();
      out.pop_back();
      EXPECT_EQ(out, pattern(rt, left, 0, count)) << "ring rank " << rank;
    });
    // Both ways at once, two messages to each neighbour (at np2 both go to the one peer, in list order).
    g.run([&](int rank, Communicator& c) {
      const int right = (rank + 1) % n, left = (rank + n - 1) % n;
      std::vector<std::vector<uint8_t>> in, out(4);
      for (int m = 0; m < 2; ++m) in.push_back(pattern(DataType::kInt32, rank, m, count));
      for (auto& o : out) o.assign(count * 4, 0xAB);
      std::vector<P2pOp> ops = {
          recvOp(left, out[0], count, DataType::kInt32), sendOp(right, in[0], count, DataType::kInt32),
          sendOp(left, in[1], count, DataType::kInt32), recvOp(right, out[1], count, DataType::kInt32)};
      if (rank % 2 == 0) std::reverse(ops.begin(), ops.end());
      const Status s = c.sendRecvGroupAsync(ops)->wait();
      ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.toString();
      if (n == 1) return;
      // From the left its message 0 (sent right), from the right its message 1 (sent left). At np2 both come
      // from the one peer: its k-th send (in its list order) meets this rank's k-th receive (in this one's).
      const bool reversed = rank % 2 == 0, peerReversed = left % 2 == 0;
      if (n > 2) {
        EXPECT_EQ(out[0], pattern(DataType::kInt32, left, 0, count)) << "rank " << rank;
        EXPECT_EQ(out[1], pattern(DataType::kInt32, right, 1, count)) << "rank " << rank;
      } else {
        const int firstSent = peerReversed ? 1 : 0, firstRecv = reversed ? 1 : 0;
        EXPECT_EQ(out[size_t(firstRecv)], pattern(DataType::kInt32, left, firstSent, count))
            << "rank " << rank;
        EXPECT_EQ(out[size_t(1 - firstRecv)], pattern(DataType::kInt32, left, 1 - firstSent, count))
            << "rank " << rank;
      }
    });
    // Pipeline: rank 0 only sends, the last rank only receives.
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> in = pattern(sendType(rank), rank, 0, count),
                           out(count * dataTypeSize(sendType(rank - 1 < 0 ? 0 : rank - 1)), 0xAB);
      std::vector<P2pOp> ops;
      if (rank > 0) ops.push_back(recvOp(rank - 1, out, count, sendType(rank - 1)));
      if (rank + 1 < n) ops.push_back(sendOp(rank + 1, in, count, sendType(rank)));
      const Status s = c.sendRecvGroupAsync(ops)->wait();
      ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.toString();
      if (rank > 0)
        EXPECT_EQ(out, pattern(sendType(rank - 1), rank - 1, 0, count)) << "pipeline rank " << rank;
    });
  }
  // A message to itself beside the ring, in another dtype of the same bytes (a copy in bytes).
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = pattern(DataType::kFloat32, rank, 5, 9), out(36, 0xAB);
    const Status s = c.sendRecvGroupAsync(
                          {recvOp(rank, out, 36, DataType::kInt8), sendOp(rank, in, 9, DataType::kFloat32)})
                         ->wait();
    ASSERT_TRUE(s.isOk()) << "rank " << rank << ": " << s.toString();
    EXPECT_EQ(out, in);
  });
  // An empty group is done at once; a collective after all this still lines up.
  g.run([&](int rank, Communicator& c) {
    EXPECT_TRUE(c.sendRecvGroupAsync({})->wait().isOk());
    std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, rank, 5);
    EXPECT_TRUE(c.allreduce(in.data(), in.data(), 5, DataType::kInt32, ReduceOp::kSum).isOk());
    EXPECT_EQ(in, testing::expectedResult(DataType::kInt32, ReduceOp::kSum, n, 5));
  });
}

INSTANTIATE_TEST_SUITE_P(Wires, LoopbackP2pGroup,
                         ::testing::Combine(::testing::Values(Wire::kLoopback, Wire::kSharedMemory,
                                                              Wire::kWindows),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<Wire, int>>& i) {
                           return std::string(testing::wireName(std::get<0>(i.param))) + "_np" +
                                  std::to_string(std::get<1>(i.param));
                         });

// Rank 0 sends 50 f32 and receives 7 f16 in one round; rank 1 expects 40 f32: both ends fail naming both
// counts (the round in bytes still fingerprints elements).
TEST(LoopbackP2pGroupErrors, CountMismatchFailsBothEndsNamingBothCounts) {
  for (Wire wire : {Wire::kLoopback, Wire::kWindows}) {
    LoopbackGroup g(2, smallSlices(), wire);
    std::vector<Status> results(2);
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> f32(400), f16(14);
      results[size_t(rank)] = rank == 0 ? c.sendRecvGroupAsync({sendOp(1, f32, 50, DataType::kFloat32),
                                                                recvOp(1, f16, 7, DataType::kFloat16)})
                                              ->wait()
                                        : c.sendRecvGroupAsync({sendOp(0, f16, 7, DataType::kFloat16),
                                                                recvOp(0, f32, 40, DataType::kFloat32)})
                                              ->wait();
    });
    SCOPED_TRACE(testing::wireName(wire));
    for (const Status& st : results) EXPECT_FALSE(st.isOk());
    EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument) << results[1].toString();
    EXPECT_NE(results[1].message().find("count=50"), std::string::npos) << results[1].message();
    EXPECT_NE(results[1].message().find("count=40"), std::string::npos) << results[1].message();
    EXPECT_NE(results[0].message().find("count=40"), std::string::npos) << results[0].message();
  }
}

// Equal bytes, another dtype (16 f32 sent, 16 i32 expected): the dtype is in each direction's fingerprint, so
// both ends fail naming both dtypes.
TEST(LoopbackP2pGroupErrors, DtypeOfTheSameSizeFailsBothEnds) {
  LoopbackGroup g(2, smallSlices());
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> buf(64), other(2);
    results[size_t(rank)] = rank == 0 ? c.sendRecvGroupAsync({sendOp(1, buf, 16, DataType::kFloat32),
                                                              recvOp(1, other, 1, DataType::kInt16)})
                                            ->wait()
                                      : c.sendRecvGroupAsync({recvOp(0, buf, 16, DataType::kInt32),
                                                              sendOp(0, other, 1, DataType::kInt16)})
                                            ->wait();
  });
  for (const Status& st : results) {
    EXPECT_FALSE(st.isOk());
    EXPECT_NE(st.message().find("i32"), std::string::npos) << st.message();
  }
  EXPECT_NE(results[1].message().find("f32"), std::string::npos) << results[1].message();
}

TEST(LoopbackP2pGroupErrors, BadOpsAreRefusedBeforeAnythingIsIssued) {
  LoopbackGroup g(2, smallSlices());
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> buf(64);
    const struct {
      P2pOp op;
      std::string what;
    } cases[] = {
        {sendOp(2, buf, 4, DataType::kFloat32), "op 1: a send to rank 2, outside [0, 2)"},
        {recvOp(-1, buf, 4, DataType::kFloat32), "op 1: a receive from rank -1, outside [0, 2)"},
        {sendOp(1, buf, 4, DataType(99)), "op 1: "},
        {recvOp(1, buf, ~size_t(0) / 2, DataType::kFloat32), "op 1: count " + std::to_string(~size_t(0) / 2)},
    };
    for (const auto& bad : cases) {
      const Status st = c.sendRecvGroupAsync({sendOp(1 - rank, buf, 4, DataType::kFloat32), bad.op})->wait();
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
      EXPECT_NE(
          st.message().find("sendrecv group of 2 ops on rank " + std::to_string(rank) + ": " + bad.what),
          std::string::npos)
          << st.message();
    }
    // Nothing was issued: the pair still lines up.
    std::vector<uint8_t> in = pattern(DataType::kFloat32, rank, 0, 4), out(16);
    ASSERT_TRUE(c.sendRecvGroupAsync({sendOp(1 - rank, in, 4, DataType::kFloat32),
                                      recvOp(1 - rank, out, 4, DataType::kFloat32)})
                    ->wait()
                    .isOk());
    EXPECT_EQ(out, pattern(DataType::kFloat32, 1 - rank, 0, 4));
  });
}

// Corrupted slices of grouped rounds (both dtypes per direction, several slices each) are detected and
// resent: exact results, every injection detected.
TEST(LoopbackP2pGroupFaults, CorruptionIsRetransmittedExactly) {
  Options o = smallSlices(128);
  o.fault.probability = 0.3;
  o.fault.mode = FaultMode::kRetransmit;  // each hit slice is damaged twice: two repair rounds
  for (Wire wire : {Wire::kLoopback, Wire::kWindows}) {
    LoopbackGroup g(3, o, wire);
    for (int i = 0; i < 4; ++i) {
      g.run([&](int rank, Communicator& c) {
        const int right = (rank + 1) % 3, left = (rank + 2) % 3;
        const DataType st = sendType(rank), rt = sendType(left);
        std::vector<uint8_t> in = pattern(st, rank, i, 999), out(999 * dataTypeSize(rt));
        const Status s =
            c.sendRecvGroupAsync({sendOp(right, in, 999, st), recvOp(left, out, 999, rt)})->wait();
        ASSERT_TRUE(s.isOk()) << s.toString();
        EXPECT_EQ(out, pattern(rt, left, i, 999));
      });
    }
    const Counters c = g.totalCounters();
    SCOPED_TRACE(testing::wireName(wire));
    EXPECT_GT(c.injected, 0u);
    EXPECT_EQ(c.detected, c.injected);
    EXPECT_EQ(c.escaped, 0u);
  }
}

}  // namespace
}  // namespace ringguard
