// The staged chunked all-gather (src/runtime/staged_allgather.cc) over the loopback transport: ranks
// 1..6, counts {0, 1, odd, one chunk exactly, not a multiple of the chunk, many chunks}, copy-only and
// arithmetic dtypes, in and out of place, results bit-identical to the closed form; with a stager whose
// copies only happen when waited for (so a missing wait, or a slot reused too early, shows as a wrong
// result); with injected faults (detected == injected, escaped == 0); and its argument errors.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ringguard/runtime/staged_allgather.h"
#include "staged_util.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;
using testing::pattern;

using testing::DeferredStager;
using testing::expectInvalid;
using testing::expectPeersHeard;
using testing::NoMemoryStager;
using testing::runWith;

Options testOptions() { return testing::stagedTestOptions(); }

std::string where(DataType t, size_t count, size_t chunkBytes, int rank) {
  return std::string(dataTypeName(t)) + " count=" + std::to_string(count) +
         " chunk=" + std::to_string(chunkBytes) + " rank " + std::to_string(rank);
}

// Every rank all-gathers its pattern through the staged path and checks the whole result bit for bit.
void stagedAndCheck(LoopbackGroup& g, DataType t, size_t count, size_t chunkBytes, bool inPlace,
                    bool deferred) {
  const int n = g.size();
  const size_t esize = dataTypeSize(t), block = count * esize;
  std::vector<uint8_t> expected;
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> p = pattern(t, r, count);
    expected.insert(expected.end(), p.begin(), p.end());
  }
  const size_t chunkElems = chunkBytes / esize;
  const size_t chunks = count == 0 ? 1 : (count + chunkElems - 1) / chunkElems;
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = pattern(t, rank, count);
    std::vector<uint8_t> out(block * size_t(n) + 1, 0xAB);
    if (inPlace && block > 0) std::memcpy(out.data() + size_t(rank) * block, in.data(), block);
    const void* send = inPlace ? out.data() + size_t(rank) * block : in.data();
    DeferredStager lazy;
    std::unique_ptr<HostStager> direct = makeMemcpyStager();
    HostStager& stager = deferred ? static_cast<HostStager&>(lazy) : *direct;
    StagedStats stats;
    Status st = stagedAllgather(c, stager, send, out.data(), count, t, chunkBytes, &stats);
    ASSERT_TRUE(st.isOk()) << where(t, count, chunkBytes, rank) << ": " << st.toString();
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end() - 1), expected)
        << where(t, count, chunkBytes, rank);
    EXPECT_EQ(out.back(), 0xAB) << "wrote past the result: " << where(t, count, chunkBytes, rank);
    if (!inPlace) EXPECT_EQ(in, pattern(t, rank, count)) << "modified the input";
    EXPECT_EQ(stats.chunks, chunks) << where(t, count, chunkBytes, rank);
    EXPECT_EQ(stats.chunkBytes, chunkElems * esize);
    EXPECT_LE(stats.stagingBytes, 2 * chunkBytes * size_t(n + 1)) << where(t, count, chunkBytes, rank);
    if (deferred) EXPECT_EQ(lazy.held, stats.stagingBytes) << where(t, count, chunkBytes, rank);
  });
}

class StagedAllgather : public ::testing::TestWithParam<int> {};

TEST_P(StagedAllgather, BitIdenticalForEveryCountAndDtype) {
  LoopbackGroup g(GetParam(), testOptions());
  const size_t chunkBytes = 96;  // a whole number of elements of every dtype below
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64, DataType::kUint8,
                     DataType::kFloat8E4M3, DataType::kComplex128}) {
    const size_t ce = chunkBytes / dataTypeSize(t);
    for (size_t count : {size_t(0), size_t(1), size_t(7), ce, 3 * ce + 5, 9 * ce}) {
      for (bool deferred : {false, true}) {
        stagedAndCheck(g, t, count, chunkBytes, /*inPlace=*/false, deferred);
        if (count % 2 == 1) stagedAndCheck(g, t, count, chunkBytes, /*inPlace=*/true, deferred);
      }
    }
  }
  // A chunk that is not a whole number of elements is rounded down (40 bytes of c128: 2 elements).
  stagedAndCheck(g, DataType::kComplex128, 11, 40, false, true);
  // One chunk holding everything.
  stagedAndCheck(g, DataType::kFloat32, 301, 1 << 20, false, true);
  const Counters c = g.totalCounters();
  EXPECT_EQ(c.detected, 0u);
  EXPECT_EQ(c.escaped, 0u);
}

INSTANTIATE_TEST_SUITE_P(Ranks, StagedAllgather, ::testing::Range(1, 7),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "np" + std::to_string(i.param);
                         });

class StagedAllgatherFaults : public ::testing::TestWithParam<FaultMode> {};

// The chunks' host all-gathers are verified like any collective: every corruption injected into them is
// detected and repaired, and the result stays bit-identical.
TEST_P(StagedAllgatherFaults, BitIdenticalAndEveryInjectionDetected) {
  testing::underFaults(GetParam(), [](LoopbackGroup& g) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      stagedAndCheck(g, t, 2001, 1024, false, true);
      stagedAndCheck(g, t, 777, 4096, true, false);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, StagedAllgatherFaults, testing::stagedFaultModes(),
                         testing::faultModeParamName);

// ---- arguments --------------------------------------------------------------------------------------

TEST(StagedAllgatherArguments, NullBufferOnOneRankFailsThereAndReachesThePeers) {
  LoopbackGroup g(3, testOptions());
  std::vector<float> in(10, 1.0f);
  std::vector<Status> st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    std::vector<float> myOut(30);
    return stagedAllgather(c, s, rank == 1 ? nullptr : in.data(), myOut.data(), 10, DataType::kFloat32, 64);
  });
  expectInvalid(st[1], "staged all-gather on rank 1: send buffer is null with count 10");
  expectPeersHeard(st, 1);
  // The refusal went through the header exchange: the host communicator is still usable, on every rank.
  st = runWith(g, [&](int, Communicator& c, HostStager& s) {
    std::vector<float> myOut(30);
    return stagedAllgather(c, s, in.data(), myOut.data(), 10, DataType::kFloat32, 64);
  });
  for (const Status& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

// Counts that differ by whole chunks (so every chunk the shorter call has matches in size) and chunk sizes
// that differ: one clean error on every rank naming both calls, before any chunk moves; nothing waits.
TEST(StagedAllgatherArguments, RanksCallingWithDifferentCountsOrChunksFailTogether) {
  LoopbackGroup g(3, testOptions());
  std::vector<Status> st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    const size_t count = rank == 2 ? 48 : 32;  // 16-element chunks: 2 chunks against 3
    std::vector<float> mine(count, 1.0f), all(3 * count);
    return stagedAllgather(c, s, mine.data(), all.data(), count, DataType::kFloat32, 64);
  });
  for (const Status& s : st) {
    expectInvalid(s,
                  "ranks called with different arguments: rank 0 has {count=32 chunk_bytes=64 dtype=f32}, "
                  "rank 2 has {count=48 chunk_bytes=64 dtype=f32}");
  }
  st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    std::vector<float> mine(32, 1.0f), all(96);
    return stagedAllgather(c, s, mine.data(), all.data(), 32, DataType::kFloat32, rank == 1 ? 128 : 64);
  });
  for (const Status& s : st) expectInvalid(s, "rank 1 has {count=32 chunk_bytes=128 dtype=f32}");
}

// Staging memory the stager cannot provide on one rank: that rank fails with the stager's error, and the
// others hear of it instead of waiting for its first chunk.
TEST(StagedAllgatherArguments, StagingFailureOnOneRankReachesThePeers) {
  LoopbackGroup g(3, testOptions());
  std::vector<Status> st = runWith(g, [&](int rank, Communicator& c, HostStager& s) {
    NoMemoryStager none;
    std::vector<float> mine(10, 1.0f), all(30);
    return stagedAllgather(c, rank == 2 ? static_cast<HostStager&>(none) : s, mine.data(), all.data(), 10,
                           DataType::kFloat32, 64);
  });
  EXPECT_EQ(st[2].code(), StatusCode::kInternal) << st[2].toString();
  EXPECT_EQ(st[2].message(), "staged all-gather on rank 2: no pinned memory");
  expectPeersHeard(st, 2);
}

// Every rank refuses the same bad arguments with the same message (each case on a group of its own).
TEST(StagedAllgatherArguments, EveryRankRefusesTheSameBadArguments) {
  std::vector<double> in(4, 1.0), out(8);
  auto every = [&](const std::function<Status(Communicator&, HostStager&)>& call, const std::string& text) {
    LoopbackGroup g(2, testOptions());
    for (const Status& s : runWith(g, [&](int, Communicator&c, HostStager&st) { return call(c, st); }))
      expectInvalid(s, text);
  };
  every([&](Communicator& c,
            HostStager& s) { return stagedAllgather(c, s, in.data(), out.data(), 4, DataType::kFloat64, 0); },
        "chunk size 0 bytes is smaller than one f64 element (8 bytes)");
  every([&](Communicator& c,
            HostStager& s) { return stagedAllgather(c, s, in.data(), out.data(), 4, DataType::kFloat64, 7); },
        "chunk size 7 bytes");
  every([&](Communicator& c,
            HostStager& s) { return stagedAllgather(c, s, in.data(), nullptr, 4, DataType::kFloat64, 64); },
        "recv buffer is null with count 4");
  every(
      [&](Communicator& c, HostStager& s) {
        return stagedAllgather(c, s, in.data(), out.data(), 4, static_cast<DataType>(99), 64);
      },
      "invalid dtype 99");
  every(
      [&](Communicator& c, HostStager& s) {
        return stagedAllgather(c, s, in.data(), out.data(), std::numeric_limits<size_t>::max() / 8,
                               DataType::kFloat64, 64);
      },
      "overflows the byte size");
  every(
      [&](Communicator& c, HostStager& s) {
        return stagedAllgather(c, s, out.data() + 1, out.data(), 4, DataType::kFloat64, 64);
      },
      "send and recv buffers overlap");
}

}  // namespace
}  // namespace ringguard
