// The staged chunked allreduce (src/runtime/staged_allreduce.cc) over the loopback transport: ranks 1..6,
// counts {0, 1, fewer than the ranks, one chunk exactly, not a multiple of the chunk, many chunks}, every
// dtype and op the host allreduce takes (premul_sum included), in and out of place, results bit-identical
// to the closed form (small integer inputs: exact in every dtype, whatever the reduction order); with a
// stager whose copies only happen when waited for (so a missing wait, or a slot reused too early, shows as
// a wrong result); with injected faults (detected == injected, escaped == 0); and its argument errors,
// which every rank reports together.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ringguard/runtime/staged_allreduce.h"
#include "staged_util.h"

namespace ringguard {
namespace {

using testing::DeferredStager;
using testing::expectedResult;
using testing::expectInvalid;
using testing::expectPeersHeard;
using testing::LoopbackGroup;
using testing::makeInput;
using testing::NoMemoryStager;
using testing::runWith;

std::string where(DataType t, ReduceOp op, size_t count, size_t chunkBytes, bool inPlace, int rank) {
  return std::string(dataTypeName(t)) + " " + reduceOpName(op) + "(" + std::to_string(premulFactor(op)) +
         ") count=" + std::to_string(count) + " chunk=" + std::to_string(chunkBytes) +
         (inPlace ? " in place" : "") + " rank " + std::to_string(rank);
}

// Every rank allreduces its verifiable input through the staged path and checks the result bit for bit.
void stagedAndCheck(LoopbackGroup& g, DataType t, ReduceOp op, size_t count, size_t chunkBytes, bool inPlace,
                    bool deferred) {
  const size_t esize = dataTypeSize(t), bytes = count * esize;
  const std::vector<uint8_t> expected = expectedResult(t, op, g.size(), count);
  const size_t chunkElems = chunkBytes / esize;
  const size_t chunks = count == 0 ? 1 : (count + chunkElems - 1) / chunkElems;
  g.run([&](int rank, Communicator& c) {
    const std::string at = where(t, op, count, chunkBytes, inPlace, rank);
    std::vector<uint8_t> in = makeInput(t, op, rank, count);
    std::vector<uint8_t> out(bytes + 1, 0xAB);
    if (inPlace) std::memcpy(out.data(), in.data(), bytes);
    const void* send = inPlace ? out.data() : in.data();
    DeferredStager lazy;
    std::unique_ptr<HostStager> direct = makeMemcpyStager();
    HostStager& stager = deferred ? static_cast<HostStager&>(lazy) : *direct;
    StagedStats stats;
    Status st = stagedAllreduce(c, stager, send, out.data(), count, t, op, chunkBytes, &stats);
    ASSERT_TRUE(st.isOk()) << at << ": " << st.toString();
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end() - 1), expected) << at;
    EXPECT_EQ(out.back(), 0xAB) << "wrote past the result: " << at;
    if (!inPlace) EXPECT_EQ(in, makeInput(t, op, rank, count)) << "modified the input: " << at;
    EXPECT_EQ(stats.chunks, chunks) << at;
    EXPECT_EQ(stats.chunkBytes, chunkElems * esize) << at;
    EXPECT_LE(stats.stagingBytes, 4 * chunkBytes) << at;  // two slots of an input and a result chunk
    if (deferred) EXPECT_EQ(lazy.held, stats.stagingBytes) << at;
  });
}

constexpr size_t kChunkBytes = 96;  // a whole number of elements of every dtype

class StagedAllreduce : public ::testing::TestWithParam<int> {};

TEST_P(StagedAllreduce, BitIdenticalForEveryCount) {
  const int n = GetParam();
  LoopbackGroup g(n, testing::stagedTestOptions());
  for (DataType t :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64, DataType::kUint8, DataType::kComplex128}) {
    const size_t ce = kChunkBytes / dataTypeSize(t);
    const size_t fewerThanRanks = size_t(std::max(n - 1, 1));
    for (size_t count : {size_t(0), size_t(1), fewerThanRanks, ce, ce + 1, 3 * ce + 5, 9 * ce}) {
      for (bool deferred : {false, true}) {
        stagedAndCheck(g, t, ReduceOp::kSum, count, kChunkBytes, /*inPlace=*/false, deferred);
        stagedAndCheck(g, t, ReduceOp::kSum, count, kChunkBytes, /*inPlace=*/true, deferred);
      }
    }
  }
  // A chunk that is not a whole number of elements is rounded down (40 bytes of c128: 2 elements).
  stagedAndCheck(g, DataType::kComplex128, ReduceOp::kSum, 11, 40, false, true);
  // One chunk holding everything.
  stagedAndCheck(g, DataType::kFloat32, ReduceOp::kSum, 301, 1 << 20, false, true);
  const Counters c = g.totalCounters();
  EXPECT_EQ(c.detected, 0u);
  EXPECT_EQ(c.escaped, 0u);
}

TEST_P(StagedAllreduce, EveryDtypeAndOpTheHostAllreduceTakes) {
  const int n = GetParam();
  LoopbackGroup g(n, testing::stagedTestOptions());
  size_t pairs = 0;
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(t, op)) continue;
      ++pairs;
      const size_t count = 3 * (kChunkBytes / dataTypeSize(t)) + 5;  // 4 chunks, the last partial
      stagedAndCheck(g, t, op, count, kChunkBytes, /*inPlace=*/pairs % 2 == 0, /*deferred=*/true);
    }
  }
  // Floats 4 x 5 ops, integers 5 x 8, bool 7, complex 2 x 2 (sum, avg), float8 none: none skipped by
  // accident.
  EXPECT_EQ(pairs, 71u);
  EXPECT_EQ(g.totalCounters().detected, 0u);
}

TEST_P(StagedAllreduce, PremulSumEveryFloatingAndComplexDtype) {
  const int n = GetParam();
  if (n == 1)
    GTEST_SKIP()
        << "premul_sum needs 2 or more ranks (its refusal on one: EveryRankRefusesTheSameBadArguments)";
  LoopbackGroup g(n, testing::stagedTestOptions());
  for (double factor : {0.5, 2.0}) {
    ReduceOp op = ReduceOp::kSum;
    ASSERT_TRUE(makePremulSum(factor, &op).isOk());
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                       DataType::kComplex64, DataType::kComplex128}) {
      const size_t count = 2 * (kChunkBytes / dataTypeSize(t)) + 3;
      stagedAndCheck(g, t, op, count, kChunkBytes, false, true);
      stagedAndCheck(g, t, op, count, kChunkBytes, true, false);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, StagedAllreduce, ::testing::Range(1, 7),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "np" + std::to_string(i.param);
                         });

class StagedAllreduceFaults : public ::testing::TestWithParam<FaultMode> {};

// The chunks' host allreduces are verified like any collective: every corruption injected into them is
// detected and repaired, and the result stays bit-identical.
TEST_P(StagedAllreduceFaults, BitIdenticalAndEveryInjectionDetected) {
  testing::underFaults(GetParam(), [](LoopbackGroup& g) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      stagedAndCheck(g, t, ReduceOp::kSum, 2001, 1024, false, true);
      stagedAndCheck(g, t, ReduceOp::kMax, 777, 4096, true, false);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, StagedAllreduceFaults, testing::stagedFaultModes(),
                         testing::faultModeParamName);

// ---- arguments --------------------------------------------------------------------------------------

TEST(StagedAllreduceArguments, NullBufferOnOneRankFailsThereAndReachesThePeers) {
  LoopbackGroup g(3, testing::stagedTestOptions());
  std::vector<Status> st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    std::vector<float> in(10, 1.0f), out(10);
    return stagedAllreduce(c, s, in.data(), rank == 1 ? nullptr : out.data(), 10, DataType::kFloat32,
                           ReduceOp::kSum, 64);
  });
  expectInvalid(st[1], "staged allreduce on rank 1: recv buffer is null with count 10");
  expectPeersHeard(st, 1);
  // The refusal went through the header exchange: the host communicator is still usable, on every rank.
  st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    std::vector<float> x(10, float(rank + 1));
    Status r = stagedAllreduce(c, s, x.data(), x.data(), 10, DataType::kFloat32, ReduceOp::kSum, 16);
    if (r.isOk()) EXPECT_EQ(x, std::vector<float>(10, 6.0f));
    return r;
  });
  for (const Status& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

// Calls that differ in count (by whole chunks, so every chunk the shorter call has matches in size), chunk,
// dtype, op or premul_sum factor: one clean error on every rank naming both calls, before any chunk moves.
TEST(StagedAllreduceArguments, RanksCallingWithDifferentArgumentsFailTogether) {
  ReduceOp half = ReduceOp::kSum, quarter = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  ASSERT_TRUE(makePremulSum(0.25, &quarter).isOk());
  struct Case {
    size_t count[2];  // rank 0 and 1; rank 2 as rank 0
    size_t chunk[2];
    DataType dtype[2];
    ReduceOp op[2];
    const char* says;
  } cases[] = {
      {{32, 48},
       {64, 64},
       {DataType::kFloat32, DataType::kFloat32},
       {ReduceOp::kSum, ReduceOp::kSum},
       "ranks called with different arguments: rank 0 has {count=32 chunk_bytes=64 dtype=f32 op=sum}, rank 1 "
       "has {count=48 chunk_bytes=64 dtype=f32 op=sum}"},
      {{32, 32},
       {64, 128},
       {DataType::kFloat32, DataType::kFloat32},
       {ReduceOp::kSum, ReduceOp::kSum},
       "rank 1 has {count=32 chunk_bytes=128 dtype=f32 op=sum}"},
      {{32, 32},
       {64, 64},
       {DataType::kFloat32, DataType::kInt32},
       {ReduceOp::kSum, ReduceOp::kSum},
       "rank 1 has {count=32 chunk_bytes=64 dtype=i32 op=sum}"},
      {{32, 32},
       {64, 64},
       {DataType::kFloat32, DataType::kFloat32},
       {ReduceOp::kSum, ReduceOp::kMax},
       "rank 1 has {count=32 chunk_bytes=64 dtype=f32 op=max}"},
      {{32, 32},
       {64, 64},
       {DataType::kFloat32, DataType::kFloat32},
       {half, quarter},
       "rank 0 has {count=32 chunk_bytes=64 dtype=f32 op=premul_sum(0.5)}, rank 1 has {count=32 "
       "chunk_bytes=64 dtype=f32 op=premul_sum(0.25)}"},
  };
  LoopbackGroup g(3, testing::stagedTestOptions());
  for (const Case& k : cases) {
    std::vector<Status> st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
      const int i = rank == 1 ? 1 : 0;
      std::vector<int64_t> buf(k.count[i], 1);  // room for either dtype
      return stagedAllreduce(c, s, buf.data(), buf.data(), k.count[i], k.dtype[i], k.op[i], k.chunk[i]);
    });
    for (const Status& s : st) expectInvalid(s, k.says);
  }
}

// Staging memory the stager cannot provide on one rank: that rank fails with the stager's error, and the
// others hear of it instead of waiting for its first chunk.
TEST(StagedAllreduceArguments, StagingFailureOnOneRankReachesThePeers) {
  LoopbackGroup g(3, testing::stagedTestOptions());
  std::vector<Status> st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    NoMemoryStager none;
    std::vector<float> x(10, 1.0f);
    return stagedAllreduce(c, rank == 2 ? static_cast<HostStager&>(none) : s, x.data(), x.data(), 10,
                           DataType::kFloat32, ReduceOp::kSum, 64);
  });
  EXPECT_EQ(st[2].code(), StatusCode::kInternal) << st[2].toString();
  EXPECT_EQ(st[2].message(), "staged allreduce on rank 2: no pinned memory");
  expectPeersHeard(st, 2);
}

// Every rank refuses the same bad arguments with the same message (each case on a group of its own).
TEST(StagedAllreduceArguments, EveryRankRefusesTheSameBadArguments) {
  std::vector<double> in(4, 1.0), out(8);
  auto every = [&](int ranks, DataType t, ReduceOp op, const void* send, void* recv, size_t count,
                   size_t chunkBytes, const std::string& text) {
    LoopbackGroup g(ranks, testing::stagedTestOptions());
    for (const Status& s : runWith(g, [&](int, Communicator&c, HostStager&st) {
           return stagedAllreduce(c, st, send, recv, count, t, op, chunkBytes);
         })) {
      expectInvalid(s, text);
    }
  };
  const DataType f64 = DataType::kFloat64;
  every(2, f64, ReduceOp::kSum, in.data(), out.data(), 4, 0, "chunk size 0 bytes is smaller than one f64");
  every(2, f64, ReduceOp::kSum, in.data(), out.data(), 4, 7, "chunk size 7 bytes");
  every(2, f64, ReduceOp::kSum, nullptr, out.data(), 4, 64, "send buffer is null with count 4");
  every(2, static_cast<DataType>(99), ReduceOp::kSum, in.data(), out.data(), 4, 64, "invalid dtype 99");
  every(2, f64, ReduceOp::kBxor, in.data(), out.data(), 4, 64, "op bxor does not reduce dtype f64");
  every(2, f64, static_cast<ReduceOp>(77), in.data(), out.data(), 4, 64, "invalid reduce op 77");
  every(2, f64, ReduceOp::kSum, in.data(), out.data(), std::numeric_limits<size_t>::max() / 4, 64,
        "overflows the byte size");
  every(2, f64, ReduceOp::kSum, out.data() + 1, out.data(), 4, 64, "send and recv buffers overlap");
  ReduceOp half = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  every(1, f64, half, in.data(), out.data(), 4, 64, "premul_sum on a single rank");
}

}  // namespace
}  // namespace ringguard
