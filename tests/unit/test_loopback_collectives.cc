// Every collective besides allreduce (test_loopback_allreduce.cc; here only its faults over every wire, and
// its one-shot and two-shot forms over the windows) in one process (ranks 1..8 over the loopback transport):
// exact results against closed forms for every dtype (and op where it reduces), counts {0, 1, odd, fewer than
// N, not divisible, many slices}, in and out of place; every fault mode with detected == injected and escaped
// == 0; persistent faults and bad arguments giving the same clear error on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/window_exchange.h"
#include "loopback_util.h"
#include "transport/window.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::LoopbackGroup;
using testing::makeInput;

// memcmp that accepts the null pointers of empty buffers.
bool sameBytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

Options smallSlices(size_t sliceBytes = 64) {
  Options o;
  o.sliceBytes = sliceBytes;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

std::vector<size_t> countsFor(int n) { return {0, 1, 7, size_t(n) - 1, size_t(n) + 1, 301}; }

std::string where(const char* what, DataType t, size_t count, int rank) {
  return std::string(what) + " " + dataTypeName(t) + " count=" + std::to_string(count) + " rank " +
         std::to_string(rank);
}

// Rank r's distinct pattern for a copy-only collective: the sum inputs of a "rank" that differs per source.
std::vector<uint8_t> pattern(DataType t, int source, size_t count) {
  return makeInput(t, ReduceOp::kSum, source * 5 + 3, count);
}

// ---- reduce-scatter ---------------------------------------------------------------------------------

void reduceScatterAndCheck(LoopbackGroup& g, DataType t, ReduceOp op, size_t recvCount, bool inPlace) {
  const int n = g.size();
  const size_t esize = dataTypeSize(t), total = recvCount * size_t(n);
  const std::vector<uint8_t> full = expectedResult(t, op, n, total);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(t, op, rank, total);
    std::vector<uint8_t> out(recvCount * esize + 1, 0xAB);
    void* recv = inPlace ? in.data() + size_t(rank) * recvCount * esize : out.data();
    Status st = c.reduceScatterAsync(in.data(), recv, recvCount, t, op)->wait();
    ASSERT_TRUE(st.isOk()) << where("reduce_scatter", t, recvCount, rank) << ": " << st.toString();
    const uint8_t* got = static_cast<const uint8_t*>(recv);
    const uint8_t* want = full.data() + size_t(rank) * recvCount * esize;
    EXPECT_TRUE(sameBytes(got, want, recvCount * esize))
        << where("reduce_scatter", t, recvCount, rank) << " op " << reduceOpName(op);
    if (!inPlace) {
      EXPECT_EQ(in, makeInput(t, op, rank, total)) << "out of place modified the input";
      EXPECT_EQ(out[recvCount * esize], 0xAB) << "wrote past the block";
    }
  });
}

// Ranks x wire: every case runs over the loopback fabric and over shared-memory rings.
class LoopbackCollectives : public ::testing::TestWithParam<std::tuple<int, testing::Wire>> {
 protected:
  int ranks() const { return std::get<0>(GetParam()); }
  LoopbackGroup group(const Options& o) const { return LoopbackGroup(ranks(), o, std::get<1>(GetParam())); }
  // Whether the one-sided protocol carries what fits the windows (with single-copy reads or without).
  bool windowed() const {
    return std::get<1>(GetParam()) == testing::Wire::kWindows ||
           std::get<1>(GetParam()) == testing::Wire::kSingleCopy;
  }
};

TEST_P(LoopbackCollectives, ReduceScatterEveryDtypeOpAndCount) {
  LoopbackGroup g = group(smallSlices());
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(t, op)) continue;  // refusals: LoopbackAllreduceOps
      for (size_t count : countsFor(ranks())) {
        reduceScatterAndCheck(g, t, op, count, false);
        if (count % 3 == 1) reduceScatterAndCheck(g, t, op, count, true);
      }
    }
  }
  EXPECT_EQ(g.totalCounters().detected, 0u);
}

// FSDP2's gradient_divide_factor path: premul_sum reduce-scatters.
TEST_P(LoopbackCollectives, ReduceScatterPremulSum) {
  if (ranks() == 1) GTEST_SKIP() << "premul_sum needs 2 or more ranks";
  LoopbackGroup g = group(smallSlices());
  for (double factor : {0.5, 0.125}) {
    ReduceOp op = ReduceOp::kSum;
    ASSERT_TRUE(makePremulSum(factor, &op).isOk());
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                       DataType::kComplex64, DataType::kComplex128}) {
      for (size_t count : countsFor(ranks())) {
        reduceScatterAndCheck(g, t, op, count, false);
        if (count % 3 == 1) reduceScatterAndCheck(g, t, op, count, true);
      }
    }
  }
  EXPECT_EQ(g.totalCounters().detected, 0u);
}

// ---- all-gather -------------------------------------------------------------------------------------

void allgatherAndCheck(LoopbackGroup& g, DataType t, size_t sendCount, bool inPlace) {
  const int n = g.size();
  const size_t esize = dataTypeSize(t), block = sendCount * esize;
  std::vector<uint8_t> expected;
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> p = pattern(t, r, sendCount);
    expected.insert(expected.end(), p.begin(), p.end());
  }
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = pattern(t, rank, sendCount);
    std::vector<uint8_t> out(block * size_t(n) + 1, 0xAB);
    if (inPlace && block > 0) std::memcpy(out.data() + size_t(rank) * block, in.data(), block);
    const void* send = inPlace ? out.data() + size_t(rank) * block : in.data();
    Status st = c.allgatherAsync(send, out.data(), sendCount, t)->wait();
    ASSERT_TRUE(st.isOk()) << where("allgather", t, sendCount, rank) << ": " << st.toString();
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end() - 1), expected)
        << where("allgather", t, sendCount, rank);
    EXPECT_EQ(out.back(), 0xAB) << "wrote past the result";
  });
}

TEST_P(LoopbackCollectives, AllgatherEveryDtypeAndCount) {
  LoopbackGroup g = group(smallSlices());
  for (DataType t : kAllDataTypes) {
    for (size_t count : countsFor(ranks())) {
      allgatherAndCheck(g, t, count, false);
      allgatherAndCheck(g, t, count, true);
    }
  }
  EXPECT_EQ(g.totalCounters().detected, 0u);
  // Bytes on the wire: nothing is sent twice, every rank sends N-1 blocks (plus the trailers), the ring's
  // optimum, whether the payload rides the fingerprint frame (small) or the pipeline (several slices); in a
  // window (small enough for it) every rank publishes its block once for all its readers.
  const int n = ranks();
  for (size_t count : {size_t(1000), size_t(100000)}) {
    const Counters before = g.totalCounters();
    allgatherAndCheck(g, DataType::kFloat32, count, false);
    const bool published = windowed() && count * 4 < testing::kTestWindowBytes;
    const uint64_t copies = n == 1 ? 0 : published ? 1 : uint64_t(n - 1);
    EXPECT_EQ(g.totalCounters().since(before).bytesSent, uint64_t(n) * copies * count * 4u)
        << "count " << count;
  }
}

// ---- broadcast --------------------------------------------------------------------------------------

void broadcastAndCheck(LoopbackGroup& g, DataType t, size_t count, int root, bool inPlace) {
  const std::vector<uint8_t> expected = pattern(t, root, count);
  const size_t bytes = count * dataTypeSize(t);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = rank == root ? expected : std::vector<uint8_t>(bytes, 0x11);
    std::vector<uint8_t> out(bytes + 1, 0xAB);
    void* recv = inPlace ? in.data() : out.data();
    Status st = c.broadcastAsync(rank == root ? in.data() : nullptr, recv, count, t, root)->wait();
    ASSERT_TRUE(st.isOk()) << where("broadcast", t, count, rank) << " root " << root << ": " << st.toString();
    EXPECT_TRUE(sameBytes(recv, expected.data(), bytes))
        << where("broadcast", t, count, rank) << " root " << root;
    if (!inPlace) EXPECT_EQ(out[bytes], 0xAB) << "wrote past the result";
  });
}

TEST_P(LoopbackCollectives, BroadcastFromEveryRoot) {
  const int n = ranks();
  LoopbackGroup g = group(smallSlices());
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUint8, DataType::kBool,
        DataType::kFloat8E4M3, DataType::kFloat8E5M2, DataType::kInt16, DataType::kComplex128}) {
    for (size_t count : countsFor(n)) {
      for (int root = 0; root < n; ++root) broadcastAndCheck(g, t, count, root, root % 2 == 0);
    }
  }
  // Bytes on the wire: the chain sends the buffer exactly N-1 times; a window holds it once for every
  // reader.
  const Counters before = g.totalCounters();
  broadcastAndCheck(g, DataType::kFloat32, 1000, n - 1, false);
  const bool published = windowed() && n > 1;
  EXPECT_EQ(g.totalCounters().since(before).bytesSent, uint64_t(published ? 1 : n - 1) * 4000u);
}

// ---- send/recv --------------------------------------------------------------------------------------

TEST_P(LoopbackCollectives, SendRecvRingShiftAndPairs) {
  const int n = ranks();
  LoopbackGroup g = group(smallSlices());
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32, DataType::kFloat8E5M2,
                     DataType::kBool, DataType::kComplex128}) {
    for (size_t count : countsFor(n)) {
      const size_t bytes = count * dataTypeSize(t);
      // Every rank sends to the right and receives from the left in one call.
      g.run([&](int rank, Communicator& c) {
        std::vector<uint8_t> in = pattern(t, rank, count), out(bytes + 1, 0xAB);
        const int right = (rank + 1) % n, left = (rank + n - 1) % n;
        Status st = c.sendRecvAsync(in.data(), count, right, out.data(), count, left, t)->wait();
        ASSERT_TRUE(st.isOk()) << where("sendrecv", t, count, rank) << ": " << st.toString();
        EXPECT_TRUE(sameBytes(out.data(), pattern(t, left, count).data(), bytes))
            << where("sendrecv", t, count, rank);
        EXPECT_EQ(out[bytes], 0xAB);
      });
      // Separate sends and receives between pairs (0 -> 1, 2 -> 3, ...); ranks not in a pair do nothing.
      g.run([&](int rank, Communicator& c) {
        if (rank % 2 == 0 && rank + 1 < n) {
          std::vector<uint8_t> in = pattern(t, rank, count);
          Status st = c.sendRecvAsync(in.data(), count, rank + 1, nullptr, 0, -1, t)->wait();
          EXPECT_TRUE(st.isOk()) << st.toString();
        } else if (rank % 2 == 1) {
          std::vector<uint8_t> out(bytes + 1, 0xAB);
          Status st = c.sendRecvAsync(nullptr, 0, -1, out.data(), count, rank - 1, t)->wait();
          ASSERT_TRUE(st.isOk()) << st.toString();
          EXPECT_TRUE(sameBytes(out.data(), pattern(t, rank - 1, count).data(), bytes));
        }
      });
    }
  }
  // A group collective after point-to-point traffic: the numbering of collectives stayed in step.
  testing::LoopbackGroup* gp = &g;
  gp->run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, rank, 5);
    EXPECT_TRUE(c.allreduce(in.data(), in.data(), 5, DataType::kInt32, ReduceOp::kSum).isOk());
    EXPECT_EQ(in, expectedResult(DataType::kInt32, ReduceOp::kSum, n, 5));
  });
}

// ---- all-to-all -------------------------------------------------------------------------------------

// Rank r sends (r + p) % 3 * 5 + p elements to rank p (unequal, some empty), or `equal` to each.
size_t splitOf(int from, int to, bool equal) { return equal ? 13 : size_t(((from + to) % 3) * 5 + to); }

void alltoallAndCheck(LoopbackGroup& g, DataType t, bool equal) {
  const int n = g.size();
  const size_t esize = dataTypeSize(t);
  g.run([&](int rank, Communicator& c) {
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t s = 0, r = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = splitOf(rank, p, equal);
      rc[p] = splitOf(p, rank, equal);
      sd[p] = s;
      rd[p] = r + 1;  // a gap before each received block: displacements are honoured
      s += sc[p];
      r += rc[p] + 1;
    }
    std::vector<uint8_t> in, out((r + 1) * esize, 0xAB);
    for (int p = 0; p < n; ++p) {
      std::vector<uint8_t> b = pattern(t, rank * n + p, sc[p]);
      in.insert(in.end(), b.begin(), b.end());
    }
    Status st = c.alltoallAsync(in.data(), sc, sd, out.data(), rc, rd, t)->wait();
    ASSERT_TRUE(st.isOk()) << "alltoall rank " << rank << ": " << st.toString();
    for (int p = 0; p < n; ++p) {
      std::vector<uint8_t> want = pattern(t, p * n + rank, rc[p]);
      EXPECT_TRUE(sameBytes(out.data() + rd[p] * esize, want.data(), want.size()))
          << "alltoall rank " << rank << " block from " << p;
      EXPECT_EQ(out[(rd[p] - 1) * esize], 0xAB) << "wrote into the gap before block " << p;
    }
  });
}

TEST_P(LoopbackCollectives, AlltoallEqualAndUnequalSplits) {
  LoopbackGroup g = group(smallSlices());
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kUint8, DataType::kInt8,
                     DataType::kBool, DataType::kFloat8E4M3, DataType::kFloat8E5M2, DataType::kComplex64}) {
    alltoallAndCheck(g, t, true);
    alltoallAndCheck(g, t, false);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LoopbackCollectives,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(testing::Wire::kLoopback,
                                                              testing::Wire::kSharedMemory,
                                                              testing::Wire::kWindows)),
                         [](const ::testing::TestParamInfo<std::tuple<int, testing::Wire>>& i) {
                           return "np" + std::to_string(std::get<0>(i.param)) + "_" +
                                  testing::wireName(std::get<1>(i.param));
                         });
// Single-copy reads change only how the copying collectives' parts travel: 2, 3 and 5 ranks of the matrix.
INSTANTIATE_TEST_SUITE_P(SingleCopy, LoopbackCollectives,
                         ::testing::Combine(::testing::Values(2, 3, 5),
                                            ::testing::Values(testing::Wire::kSingleCopy)),
                         [](const ::testing::TestParamInfo<std::tuple<int, testing::Wire>>& i) {
                           return "np" + std::to_string(std::get<0>(i.param)) + "_" +
                                  testing::wireName(std::get<1>(i.param));
                         });

// ---- all-reduce over the windows: one-shot and two-shot -------------------------------------------------

void allreduceAndCheck(LoopbackGroup& g, DataType t, ReduceOp op, size_t count, bool inPlace) {
  const int n = g.size();
  const std::vector<uint8_t> expected = expectedResult(t, op, n, count);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(t, op, rank, count), out(in.size() + 1, 0xAB);
    Status st = c.allreduce(in.data(), inPlace ? in.data() : out.data(), count, t, op);
    ASSERT_TRUE(st.isOk()) << where("allreduce", t, count, rank) << ": " << st.toString();
    const uint8_t* got = inPlace ? in.data() : out.data();
    EXPECT_TRUE(sameBytes(got, expected.data(), expected.size()))
        << where("allreduce", t, count, rank) << " op " << reduceOpName(op) << (inPlace ? " in place" : "");
    if (!inPlace) EXPECT_EQ(out[expected.size()], 0xAB) << "wrote past the result";
  });
}

// A count of `t` whose payload takes the two-shot on the test windows from 3 ranks (kWindowTwoShotBytes,
// within a half for up to 8 ranks), not divisible by the ranks.
size_t twoShotCount(DataType t) { return (kWindowTwoShotBytes + 1000) / dataTypeSize(t) + 1; }

// 2, 3, 5 and 8 ranks over the windows (the ring's all-reduce: test_loopback_allreduce.cc); the two-shot in
// place: the fault suite below and WindowExchange.AllreduceOnTheWindowsGivesTheRingsBits.
class LoopbackWindowsAllreduce : public ::testing::TestWithParam<int> {};

TEST_P(LoopbackWindowsAllreduce, OneShotAndTwoShotEveryDtypeAndOp) {
  static_assert(kWindowTwoShotBytes + 1000 + 8 * 64 <= testing::kTestWindowBytes, "two-shot sizes fit");
  LoopbackGroup g(GetParam(), smallSlices(), testing::Wire::kWindows);
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(t, op)) continue;
      for (size_t count : {size_t(0), size_t(1), size_t(GetParam()) + 1, size_t(301), twoShotCount(t)}) {
        allreduceAndCheck(g, t, op, count, false);
        if (count % 2 == 1 && count < 1000) allreduceAndCheck(g, t, op, count, true);
      }
    }
  }
  const Counters c = g.totalCounters();
  EXPECT_EQ(c.detected, 0u);
  EXPECT_EQ(c.controlFrames, 0u) << "every call on the windows";
}

INSTANTIATE_TEST_SUITE_P(Ranks, LoopbackWindowsAllreduce, ::testing::Values(2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "np" + std::to_string(i.param);
                         });

// ---- faults: every collective, every mode -----------------------------------------------------------

struct FaultCase {
  FaultMode mode;
  const char* name;
};

class LoopbackCollectiveFaults : public ::testing::TestWithParam<FaultCase> {};

TEST_P(LoopbackCollectiveFaults, EveryCollectiveBitIdenticalAndEveryInjectionDetected) {
  for (testing::Wire wire : {testing::Wire::kLoopback, testing::Wire::kSharedMemory, testing::Wire::kWindows,
                             testing::Wire::kSingleCopy})
    for (int n : {2, 3, 5}) {
      SCOPED_TRACE(testing::wireName(wire));
      Options o = smallSlices(256);
      o.maxRetries = 5;
      o.fault.mode = GetParam().mode;
      o.fault.probability = 0.15;
      o.fault.seed = 7;
      o.fault.delayMs = 1;
      LoopbackGroup g(n, o, wire);
      for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
        reduceScatterAndCheck(g, t, ReduceOp::kSum, 777, false);
        reduceScatterAndCheck(g, t, ReduceOp::kMax, 500, true);
        allgatherAndCheck(g, t, 901, false);
        broadcastAndCheck(g, t, 1500, n - 1, false);
        alltoallAndCheck(g, t, false);
        allreduceAndCheck(g, t, ReduceOp::kSum, 901, false);             // windows: one-shot
        allreduceAndCheck(g, t, ReduceOp::kMax, twoShotCount(t), true);  // windows: two-shot from 3 ranks
      }
      const Counters c = g.totalCounters();
      EXPECT_EQ(c.escaped, 0u) << "np" << n;
      if (GetParam().mode == FaultMode::kDelay) {
        EXPECT_GT(c.delayed, 0u) << "np" << n;
      } else {
        EXPECT_GT(c.injected, 0u) << "np" << n;
        EXPECT_EQ(c.detected, c.injected) << "np" << n;
        EXPECT_GT(c.retransmitted, 0u) << "np" << n;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, LoopbackCollectiveFaults,
    ::testing::Values(FaultCase{FaultMode::kBitFlip, "bitflip"}, FaultCase{FaultMode::kMultiBit, "multibit"},
                      FaultCase{FaultMode::kBurst, "burst"}, FaultCase{FaultMode::kGarbage, "garbage"},
                      FaultCase{FaultMode::kTrailer, "trailer"},
                      FaultCase{FaultMode::kRetransmit, "retransmit"}, FaultCase{FaultMode::kDelay, "delay"}),
    [](const ::testing::TestParamInfo<FaultCase>& i) { return std::string(i.param.name); });

// Send/recv on the windows (window_sendrecv.h): a message that fits a slot sends no control frame; a larger
// one keeps the two-sided path; a slot message and a frame message in one call (the two directions' sizes
// differ) both arrive. Ring shifts at 2 and 3 ranks, exact bytes.
TEST(LoopbackWindowsSendRecv, SlotMessagesSendNoControlFrameAndLargerOnesTheFrames) {
  for (testing::Wire wire : {testing::Wire::kWindows, testing::Wire::kSingleCopy})
    for (int n : {2, 3}) {
      SCOPED_TRACE(testing::wireName(wire));
      LoopbackGroup g(n, smallSlices(), wire);
      const size_t slotCount = kWindowSlotBytes / 4, largeCount = slotCount + 1;
      for (size_t count : {size_t(1), size_t(1000), slotCount, largeCount}) {
        const Counters before = g.totalCounters();
        for (int round = 0; round < 2; ++round) {
          g.run([&](int rank, Communicator& c) {
            std::vector<uint8_t> in = pattern(DataType::kFloat32, rank + round, count),
                                 out(count * 4 + 1, 0xAB);
            const int right = (rank + 1) % n, left = (rank + n - 1) % n;
            Status st =
                c.sendRecvAsync(in.data(), count, right, out.data(), count, left, DataType::kFloat32)->wait();
            ASSERT_TRUE(st.isOk()) << "rank " << rank << " count " << count << ": " << st.toString();
            EXPECT_TRUE(
                sameBytes(out.data(), pattern(DataType::kFloat32, left + round, count).data(), count * 4))
                << "rank " << rank << " count " << count;
            EXPECT_EQ(out[count * 4], 0xAB);
          });
        }
        const Counters d = g.totalCounters().since(before);
        if (count <= slotCount) {
          EXPECT_EQ(d.controlFrames, 0u) << "np" << n << " count " << count;
        } else {
          EXPECT_GT(d.controlFrames, 0u) << "np" << n << " count " << count;
        }
      }
      // Rank 0 sends a slot's worth and receives a larger message in one call, and the reverse at rank 1.
      if (n == 2) {
        g.run([&](int rank, Communicator& c) {
          const size_t sendCount = rank == 0 ? 100 : largeCount, recvCount = rank == 0 ? largeCount : 100;
          std::vector<uint8_t> in = pattern(DataType::kFloat32, rank, sendCount), out(recvCount * 4);
          Status st = c.sendRecvAsync(in.data(), sendCount, 1 - rank, out.data(), recvCount, 1 - rank,
                                      DataType::kFloat32)
                          ->wait();
          ASSERT_TRUE(st.isOk()) << "rank " << rank << ": " << st.toString();
          EXPECT_EQ(out, pattern(DataType::kFloat32, 1 - rank, recvCount)) << "rank " << rank;
        });
      }
    }
}

TEST(LoopbackCollectiveFaults, SendRecvCorruptionIsRetransmitted) {
  Options o = smallSlices(128);
  o.fault.probability = 0.3;
  o.fault.mode = FaultMode::kRetransmit;  // each hit slice is damaged twice: two repair rounds
  LoopbackGroup g(2, o);
  for (int i = 0; i < 5; ++i) {
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> in = pattern(DataType::kFloat32, rank, 999), out(999 * 4);
      Status st =
          c.sendRecvAsync(in.data(), 999, 1 - rank, out.data(), 999, 1 - rank, DataType::kFloat32)->wait();
      ASSERT_TRUE(st.isOk()) << st.toString();
      EXPECT_EQ(out, pattern(DataType::kFloat32, 1 - rank, 999));
    });
  }
  const Counters c = g.totalCounters();
  EXPECT_GT(c.injected, 0u);
  EXPECT_EQ(c.detected, c.injected);
  EXPECT_EQ(c.escaped, 0u);
  EXPECT_GE(c.repairRounds, 2u);
}

// A slice that stays corrupt: every rank of the collective ends with the same kCorruption error.
TEST(LoopbackCollectiveFaults, PersistentFaultSameErrorEverywhere) {
  for (const char* which : {"reduce_scatter", "allgather", "broadcast", "alltoall"}) {
    Options o = smallSlices(64);
    o.maxRetries = 2;
    o.fault.schedule = {FaultScheduleEntry{0, 0, 1, 1}};  // collective 0, step 0, slice 1, into rank 1
    o.fault.repeat = 10;
    LoopbackGroup g(3, o);
    std::vector<Status> results(3);
    g.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> in(3 * 400 * 4, 1), out(3 * 400 * 4);
      const std::string w = which;
      if (w == "reduce_scatter") {
        results[rank] =
            c.reduceScatterAsync(in.data(), out.data(), 400, DataType::kInt32, ReduceOp::kSum)->wait();
      } else if (w == "allgather") {
        results[rank] = c.allgatherAsync(in.data(), out.data(), 400, DataType::kInt32)->wait();
      } else if (w == "broadcast") {
        results[rank] = c.broadcastAsync(in.data(), out.data(), 400, DataType::kInt32, 0)->wait();
      } else {
        results[rank] = c.alltoallAsync(in.data(), out.data(), 400, DataType::kInt32)->wait();
      }
    });
    // Ranks that do not receive the failing slice learn it from the verdicts: the same message everywhere.
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(results[r].code(), StatusCode::kCorruption)
          << which << " rank " << r << ": " << results[r].toString();
      EXPECT_EQ(results[r].message(), results[0].message()) << which;
    }
    EXPECT_NE(results[0].message().find(std::string(which) + " seq 0"), std::string::npos)
        << results[0].message();
    EXPECT_NE(results[0].message().find("step 0, slice 1"), std::string::npos) << results[0].message();
  }
}

// ---- errors -----------------------------------------------------------------------------------------

TEST(LoopbackCollectiveErrors, MismatchedBroadcastRootNamesBroadcastAndBothRoots) {
  LoopbackGroup g(3, smallSlices());
  std::vector<Status> results(3);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> buf(40);
    results[rank] =
        c.broadcastAsync(buf.data(), buf.data(), 10, DataType::kFloat32, rank == 2 ? 1 : 0)->wait();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kFingerprintMismatch) << results[r].toString();
    EXPECT_NE(results[r].message().find("{broadcast dtype=f32 count=10 root=0"), std::string::npos)
        << results[r].message();
    EXPECT_NE(results[r].message().find("root=1"), std::string::npos) << results[r].message();
  }
}

TEST(LoopbackCollectiveErrors, DifferentCollectivesAreNamed) {
  LoopbackGroup g(2, smallSlices());
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in(80), out(80);
    results[rank] =
        rank == 0
            ? c.allgatherAsync(in.data(), out.data(), 10, DataType::kFloat32)->wait()
            : c.reduceScatterAsync(in.data(), out.data(), 10, DataType::kFloat32, ReduceOp::kSum)->wait();
  });
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << st.toString();
    EXPECT_NE(st.message().find("allgather"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("reduce_scatter"), std::string::npos) << st.message();
  }
}

TEST(LoopbackCollectiveErrors, SendRecvCountMismatchNamesBothCounts) {
  LoopbackGroup g(2, smallSlices());
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> buf(400);
    results[rank] = rank == 0
                        ? c.sendRecvAsync(buf.data(), 50, 1, nullptr, 0, -1, DataType::kFloat32)->wait()
                        : c.sendRecvAsync(nullptr, 0, -1, buf.data(), 40, 0, DataType::kFloat32)->wait();
  });
  EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument) << results[1].toString();
  EXPECT_NE(results[1].message().find("count=50"), std::string::npos) << results[1].message();
  EXPECT_NE(results[1].message().find("count=40"), std::string::npos) << results[1].message();
  EXPECT_EQ(results[0].code(), StatusCode::kPeerError) << results[0].toString();
  EXPECT_NE(results[0].message().find("count=40"), std::string::npos) << results[0].message();
}

// Found by the fault soak (tests/soak): every rank checks the repair entries it hears of, but a rank knows
// only its own flows' lengths. Rank 2 (flows of 1 slice) rejected the entry for slice 5 of the 10-slice
// flow 1 -> 0 as "outside the schedule", failing a collective one retransmission repairs.
TEST(LoopbackCollectives, AlltoallRepairOfALongerFlowBetweenOtherRanks) {
  Options o = smallSlices(100);
  o.maxRetries = 3;
  o.fault.mode = FaultMode::kBitFlip;
  o.fault.schedule = {{0, 1, 5, 0}};  // collective 0, step 1 (flow 1 -> 0), slice 5, received by rank 0
  LoopbackGroup g(3, o);
  auto count = [](int src, int dst) -> size_t { return src == 1 && dst == 0 ? 1000 : 100; };
  std::vector<Status> results(3);
  std::vector<char> exact(3, 0);  // not vector<bool>: ranks write their own entries concurrently (TSan)
  g.run([&](int me, Communicator& c) {
    std::vector<size_t> sc(3), sd(3), rc(3), rd(3);
    size_t s = 0, r = 0;
    for (int p = 0; p < 3; ++p) {
      sc[p] = count(me, p), rc[p] = count(p, me), sd[p] = s, rd[p] = r;
      s += sc[p], r += rc[p];
    }
    std::vector<int8_t> in(s), out(r, 0);
    for (int p = 0; p < 3; ++p)
      for (size_t i = 0; i < sc[p]; ++i) in[sd[p] + i] = int8_t(me * 10 + p + int(i % 7));
    results[me] = c.alltoallAsync(in.data(), sc, sd, out.data(), rc, rd, DataType::kInt8)->wait();
    bool ok = true;
    for (int p = 0; p < 3; ++p)
      for (size_t i = 0; i < rc[p]; ++i) ok = ok && out[rd[p] + i] == int8_t(p * 10 + me + int(i % 7));
    exact[me] = ok;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(results[r].isOk()) << "rank " << r << ": " << results[r].toString();
    EXPECT_TRUE(exact[r]) << "rank " << r;
  }
  EXPECT_EQ(g.comm(0).counters().detected, 1u);
  EXPECT_EQ(g.comm(1).counters().retransmitted, 1u);
  EXPECT_EQ(g.comm(2).counters().retransmitted, 0u);
}

TEST(LoopbackCollectiveErrors, AlltoallSplitMismatchNamesBothCounts) {
  LoopbackGroup g(2, smallSlices());
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in(400), out(400);
    std::vector<size_t> sc = {5, 5}, d = {0, 10}, rc = {5, rank == 1 ? size_t(5) : size_t(5)};
    if (rank == 1) rc = {7, 5};  // rank 0 sends 5 to rank 1, which expects 7
    results[rank] = c.alltoallAsync(in.data(), sc, d, out.data(), rc, d, DataType::kInt32)->wait();
  });
  EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument) << results[1].toString();
  EXPECT_NE(results[1].message().find("count=5"), std::string::npos) << results[1].message();
  EXPECT_NE(results[1].message().find("count=7"), std::string::npos) << results[1].message();
  EXPECT_EQ(results[0].code(), StatusCode::kPeerError) << results[0].toString();
}

// A hostile receiver: its verdict to the sender (well sealed, so the channel accepts it) names a slice
// the exchange does not have. The sender rejects it with a clear error instead of indexing its trailers
// with it; the receiver, which got its data, hears of the error.
TEST(LoopbackCollectiveErrors, ForgedSendRecvVerdictIsRejected) {
  Options o = smallSlices(256);
  o.logLevel = "off";
  LoopbackGroup g(2, o);
  g.fabric().setControlHook([](int from, int, ControlTag tag, std::vector<uint8_t>* frame) {
    if (from != 1 || tag != ControlTag::kVerdict) return true;
    // Body: {seq, round, count} (16 bytes), then the entries. Append one and re-seal.
    SliceFailure f;
    f.column = 0;  // the flow 0 -> 1
    f.slice = 1000000;
    f.sender = 0;
    f.receiver = 1;
    f.reason = uint8_t(SliceCheck::kCorrupt);
    testing::appendVerdictEntry(frame, 12, f);
    return true;
  });
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> buf(4000);
    results[rank] = rank == 0
                        ? c.sendRecvAsync(buf.data(), 1000, 1, nullptr, 0, -1, DataType::kFloat32)->wait()
                        : c.sendRecvAsync(nullptr, 0, -1, buf.data(), 1000, 0, DataType::kFloat32)->wait();
  });
  EXPECT_EQ(results[0].code(), StatusCode::kTransportError) << results[0].toString();
  EXPECT_NE(results[0].message().find("verdict entry from rank 1 rejected"), std::string::npos)
      << results[0].message();
  EXPECT_NE(results[0].message().find("slice 1000000"), std::string::npos) << results[0].message();
  // The receiver's own exchange had completed; its next call fails with the sender's error.
  std::vector<uint8_t> buf(40);
  Status next = g.comm(1).allreduce(buf.data(), buf.data(), 10, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_FALSE(next.isOk());
}

TEST(LoopbackCollectiveErrors, BadArgumentsNameWhatAndWhere) {
  LoopbackGroup g(2, smallSlices());
  struct Case {
    std::function<std::shared_ptr<Work>(Communicator&, uint8_t*)> call;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {[](Communicator& c, uint8_t* b) { return c.broadcastAsync(b, b, 4, DataType::kFloat32, 2); },
       "broadcast on rank 1: root 2 is outside [0, 2)"},
      {[](Communicator& c, uint8_t* b) { return c.allgatherAsync(nullptr, b, 4, DataType::kFloat32); },
       "allgather on rank 1: send buffer is null with count 4"},
      {[](Communicator& c, uint8_t* b) {
         return c.reduceScatterAsync(b, b + 4, 4, DataType::kFloat32, ReduceOp::kSum);
       },
       "reduce_scatter on rank 1: send and recv buffers overlap"},
      {[](Communicator& c, uint8_t* b) {
         return c.sendRecvAsync(b, 4, 5, nullptr, 0, -1, DataType::kFloat32);
       },
       "sendrecv on rank 1: destination rank 5 is outside [0, 2)"},
      {[](Communicator& c, uint8_t* b) {
         return c.alltoallAsync(b, {1}, {0}, b + 64, {1}, {0}, DataType::kFloat32);
       },
       "alltoall on rank 1: split vectors need 2 entries, got 1"},
  };
  for (const Case& k : cases) {
    LoopbackGroup fresh(2, smallSlices());
    std::vector<Status> results(2);
    fresh.run([&](int rank, Communicator& c) {
      std::vector<uint8_t> buf(256);
      if (rank == 1) {
        results[rank] = k.call(c, buf.data())->wait();
      } else {
        results[rank] = c.allgatherAsync(buf.data(), buf.data() + 64, 4, DataType::kFloat32)->wait();
      }
    });
    EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument) << results[1].toString();
    EXPECT_NE(results[1].message().find(k.expect), std::string::npos) << results[1].message();
    // The other rank does not wait for it: it hears of the error (or of a fingerprint it cannot match).
    EXPECT_FALSE(results[0].isOk());
  }
}

}  // namespace
}  // namespace ringguard
