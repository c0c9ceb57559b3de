// The one-sided protocol on host shared memory (algorithms/window_exchange.h): what the collective suites
// (test_loopback_collectives.cc, Wire::kWindows) do not show. No control frame when nothing fails; failures
// end the same way on every rank in the same collective; a peer's window is read as untrusted.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/window_exchange.h"
#include "executor/host_executor.h"
#include "loopback_util.h"
#include "ringguard/core/crc32.h"
#include "ringguard/runtime/communicator.h"
#include "transport/window.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;
using testing::Wire;

std::vector<int32_t> ramp(int rank, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = int32_t(rank * 1000 + int(i % 997));
  return v;
}

// Every rank's result is the same error (code and message, word for word), naming each of `needles`.
void expectTheSameErrorOnEveryRank(const std::vector<Status>& results, StatusCode code,
                                   std::initializer_list<const char*> needles) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].code(), code) << "rank " << r << ": " << results[r].toString();
    EXPECT_EQ(results[r].message(), results[0].message()) << "rank " << r;
  }
  for (const char* needle : needles) {
    EXPECT_NE(results[0].message().find(needle), std::string::npos)
        << needle << " in " << results[0].message();
  }
}

std::vector<int32_t> rampSum(int n, size_t count) {
  std::vector<int32_t> v(count, 0);
  for (int r = 0; r < n; ++r) {
    const std::vector<int32_t> x = ramp(r, count);
    for (size_t i = 0; i < count; ++i) v[i] += x[i];
  }
  return v;
}

// Every small collective of a fault-free run is flags and copies: no control frame, the handshake's aside.
TEST(WindowExchange, FaultFreeCollectivesSendNoControlFrame) {
  for (int n : {2, 3, 4}) {
    LoopbackGroup g(n, testing::quietOptions(), Wire::kWindows);
    g.run([&](int, Communicator& c) {  // the handshake's frames are behind this first collective
      int32_t one = 1;
      ASSERT_TRUE(c.allreduce(&one, &one, 1, DataType::kInt32, ReduceOp::kSum).isOk());
    });
    const Counters before = g.totalCounters();
    for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(9000)}) {  // 9000: two chunks
      g.run([&](int rank, Communicator& c) {
        std::vector<int32_t> x = ramp(rank, count);
        ASSERT_TRUE(c.allreduce(x.data(), x.data(), count, DataType::kInt32, ReduceOp::kSum).isOk());
        EXPECT_EQ(x, rampSum(n, count)) << "np" << n << " count " << count;
        std::vector<int32_t> all(count * size_t(n));
        const std::vector<int32_t> mine = ramp(rank, count);
        ASSERT_TRUE(c.allgather(mine.data(), all.data(), count, DataType::kInt32).isOk());
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(std::equal(all.begin() + long(count) * r, all.begin() + long(count) * (r + 1),
                                 ramp(r, count).begin()));
        }
      });
    }
    const Counters c = g.totalCounters().since(before);
    EXPECT_EQ(c.controlFrames, 0u) << "np" << n;
    EXPECT_EQ(c.detected, 0u) << "np" << n;
    EXPECT_GT(c.slicesVerified, 0u) << "np" << n;
  }
}

// A chunk that stays corrupt on every re-read: the reader fails, and every rank returns its kCorruption,
// word for word, in the same collective (the settle step), naming the chunk and its publisher.
TEST(WindowExchange, PersistentCorruptionIsTheSameErrorOnEveryRank) {
  Options o = testing::quietOptions();
  o.maxRetries = 2;
  o.fault.schedule = {FaultScheduleEntry{1, 0, 0, 1}};  // collective 1, chunk 0, read by rank 1
  o.fault.repeat = 10;
  LoopbackGroup g(3, o, Wire::kWindows);
  std::vector<Status> results(3);
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> x = ramp(rank, 100);
    ASSERT_TRUE(
        c.allreduce(x.data(), x.data(), 100, DataType::kInt32, ReduceOp::kSum).isOk());  // collective 0
    results[size_t(rank)] = c.allreduce(x.data(), x.data(), 100, DataType::kInt32, ReduceOp::kSum);
  });
  expectTheSameErrorOnEveryRank(results, StatusCode::kCorruption,
                                {"allreduce seq 1 on rank 1: chunk 0 of rank 0's window", "all 3 reads"});
}

// Ranks that call different collectives all fail with the same mismatch, naming both, before any payload
// is used.
TEST(WindowExchange, FingerprintMismatchIsTheSameErrorOnEveryRank) {
  LoopbackGroup g(3, testing::quietOptions(), Wire::kWindows);
  std::vector<Status> results(3);
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> x = ramp(rank, 64);
    results[size_t(rank)] =
        c.allreduce(x.data(), x.data(), rank == 2 ? 63 : 64, DataType::kInt32, ReduceOp::kSum);
  });
  expectTheSameErrorOnEveryRank(results, StatusCode::kFingerprintMismatch, {"count=64", "count=63"});
}

// A call that fits the window against one that does not: one rank publishes, the other sends a fingerprint
// frame; both fail with the mismatch (the one-sided rank names both fingerprints, the other gets its error),
// neither waits for the timeout.
TEST(WindowExchange, RanksOnDifferentPathsFailNamingBoth) {
  Options o = testing::quietOptions();
  o.timeout = std::chrono::milliseconds(60000);
  LoopbackGroup g(2, o, Wire::kWindows);
  std::vector<Status> results(2);
  const auto start = std::chrono::steady_clock::now();
  g.run([&](int rank, Communicator& c) {
    const size_t count = rank == 0 ? 100 : 30000;  // 120000 bytes do not fit the window
    std::vector<int32_t> x = ramp(rank, count);
    results[size_t(rank)] = c.allreduce(x.data(), x.data(), count, DataType::kInt32, ReduceOp::kSum);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(results[0].code(), StatusCode::kFingerprintMismatch) << results[0].toString();
  EXPECT_FALSE(results[1].isOk());
  for (const Status& st : results) {
    EXPECT_NE(st.message().find("count=100 "), std::string::npos) << st.toString();
    EXPECT_NE(st.message().find("count=30000 "), std::string::npos) << st.toString();
  }
}

// Control-mode injection damages the read of a peer's fingerprint (its CRC fails): counted, read again.
TEST(WindowExchange, DamagedFingerprintReadIsReadAgain) {
  for (int sender = 0; sender < 3; ++sender) {
    const int receiver = (sender + 1) % 3;
    Options o = testing::quietOptions();
    o.fault.mode = FaultMode::kControl;
    o.fault.schedule = {{1, int(ControlTag::kFingerprint), sender, receiver}};  // collective 1
    LoopbackGroup g(3, o, Wire::kWindows);
    for (int i = 0; i < 3; ++i) {
      g.run([&](int rank, Communicator& c) {
        std::vector<int32_t> x = ramp(rank, 50);
        ASSERT_TRUE(c.allreduce(x.data(), x.data(), 50, DataType::kInt32, ReduceOp::kSum).isOk());
        EXPECT_EQ(x, rampSum(3, 50));
      });
    }
    const Counters c = g.totalCounters();
    EXPECT_EQ(c.injected, 1u) << sender << " -> " << receiver;
    EXPECT_EQ(c.detected, 1u) << sender << " -> " << receiver;
    EXPECT_EQ(c.retransmitted, 1u) << sender << " -> " << receiver;  // the seal read again
  }
}

// A peer whose part table points outside its window (a bug or a hostile process) is an error naming it,
// never a read out of bounds. Rank 1 runs the exchange against a window rank 0 filled by hand.
TEST(WindowExchange, AnImpossiblePartTableIsAnErrorNamingThePeer) {
  std::shared_ptr<LoopbackFabric> fabric;
  std::vector<std::unique_ptr<Transport>> t = makeLoopbackTransports(2, &fabric);
  testing::wrapInSharedMemory(&t, testing::kTestRingBytes, testing::kTestWindowBytes);
  Windows& w = *t[1]->windows();
  const Options o = testing::quietOptions();
  const Fingerprint fp = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kInt32, 16, IssueOrder{});
  // Rank 0's "publication" of epoch 1: a valid fingerprint, and a part for rank 1 far past the window.
  HalfHeader& h = w.half(0, 1);
  h.seal.fingerprint = fp;
  h.seal.declined = 0;
  h.seal.crc = crc32(&h.seal, offsetof(HalfSeal, crc));
  w.part(0, 1, 1) = PartEntry{uint64_t(1) << 40, 64, 0};
  h.epoch.store(1, std::memory_order_release);

  Counters counters;
  CollectiveContext ctx = testing::contextFor(t[1].get(), &o, &counters);
  ctx.name = "allreduce";
  HostExecutor exec;
  ASSERT_TRUE(runsOneSided(ctx, exec, 64));
  std::vector<int32_t> x(16, 1);
  std::vector<EagerPayload> out{EagerPayload{x.data(), 64}, EagerPayload{}};
  std::vector<std::vector<uint8_t>> in;
  const Status st = windowExchange(ctx, fp, out, {64, 0}, &in);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("rank 0's window gives this rank 64 bytes at offset 1099511627776"),
            std::string::npos)
      << st.message();
}

// All-to-all: splits that do not match are the same kInvalidArgument on every rank, naming both sizes; a
// rank whose blocks do not fit the window sends every rank to the ring (exact results either way).
TEST(WindowExchange, AlltoallSplitsAndBlocksTooLargeForTheWindow) {
  LoopbackGroup g(2, testing::quietOptions(), Wire::kWindows);
  std::vector<Status> results(2);
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> in(20, rank), out(20, -1);
    std::vector<size_t> sc = {5, 5}, d = {0, 10}, rc = {5, 5};
    if (rank == 1) rc = {7, 5};  // rank 0 sends 5 to rank 1, which expects 7
    results[size_t(rank)] = c.alltoallAsync(in.data(), sc, d, out.data(), rc, d, DataType::kInt32)->wait();
  });
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_EQ(st.message(), results[1].message());
  }
  EXPECT_NE(results[0].message().find("rank 0 sends rank 1 20 bytes, which expects 28"), std::string::npos)
      << results[0].message();

  LoopbackGroup h(3, testing::quietOptions(), Wire::kWindows);
  const Counters before = h.totalCounters();
  h.run([&](int rank, Communicator& c) {
    // Rank 2 sends 30000 elements (120 KB, more than the test window) to each peer; the others 3.
    const size_t big = 30000;
    std::vector<size_t> sc(3), sd(3), rc(3), rd(3);
    size_t s = 0, r = 0;
    for (int p = 0; p < 3; ++p) {
      sc[size_t(p)] = rank == 2 && p != 2 ? big : 3;
      rc[size_t(p)] = p == 2 && rank != 2 ? big : 3;
      sd[size_t(p)] = s;
      rd[size_t(p)] = r;
      s += sc[size_t(p)];
      r += rc[size_t(p)];
    }
    std::vector<int32_t> in(s), out(r, -1);
    for (size_t i = 0; i < s; ++i) in[i] = int32_t(rank * 100000 + int(i));
    ASSERT_TRUE(c.alltoallAsync(in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32)->wait().isOk());
    for (int p = 0; p < 3; ++p) {
      // Peer p's block for this rank starts at p's displacement for it.
      size_t from = 0;
      for (int q = 0; q < rank; ++q) from += p == 2 && q != 2 ? big : 3;
      for (size_t i = 0; i < rc[size_t(p)]; ++i) {
        ASSERT_EQ(out[rd[size_t(p)] + i], int32_t(p * 100000 + int(from + i))) << rank << " from " << p;
      }
    }
  });
  EXPECT_GT(h.totalCounters().since(before).controlFrames, 0u);  // the ring ran
}

// Read once: a reducing collective's reads are verified where the peer published them and not copied; a read
// that injection damaged is a private copy (the window is the peer's, and other readers read it), and the
// clean re-read is in place again.
TEST(WindowExchange, ReadOnceVerifiesAPeersPayloadWhereItLies) {
  std::shared_ptr<LoopbackFabric> fabric;
  std::vector<std::unique_ptr<Transport>> t = makeLoopbackTransports(2, &fabric);
  testing::wrapInSharedMemory(&t, testing::kTestRingBytes, testing::kTestWindowBytes);
  const Options o = testing::quietOptions();
  FaultOptions f;
  f.mode = FaultMode::kBitFlip;
  f.schedule = {{0, 0, 1, 0}};  // collective 0, chunk 1, read by rank 0
  const FaultInjector injector(f);
  const size_t count = 5000, bytes = count * 4;  // chunks 0 and 1
  const std::vector<std::vector<int32_t>> x = {ramp(0, count), ramp(1, count)};
  const Fingerprint fp = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kInt32, count, IssueOrder{});
  std::vector<std::vector<const uint8_t*>> at(2);
  std::vector<std::vector<std::vector<uint8_t>>> in(2);
  std::vector<Counters> counters(2);
  std::vector<Status> st(2);
  testing::runRanks(2, [&](int r) {
    CollectiveContext ctx = testing::contextFor(t[size_t(r)].get(), &o, &counters[size_t(r)], 0, &injector);
    std::vector<EagerPayload> out(2);
    out[size_t(1 - r)] = EagerPayload{x[size_t(r)].data(), bytes};
    std::vector<size_t> inBytes(2, 0);
    inBytes[size_t(1 - r)] = bytes;
    st[size_t(r)] =
        windowExchange(ctx, fp, out, inBytes, &in[size_t(r)], WindowReads{nullptr, &at[size_t(r)]});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[size_t(r)].isOk()) << st[size_t(r)].toString();
    const int p = 1 - r;
    const Windows& w = *t[size_t(r)]->windows();
    const uint8_t* data = w.data(p, 1);  // epoch 1
    const uint8_t* got = at[size_t(r)][size_t(p)];
    EXPECT_TRUE(got >= data && got + bytes <= data + w.layout().capacity)
        << "rank " << r << " reads in place";
    EXPECT_EQ(std::memcmp(got, x[size_t(p)].data(), bytes), 0) << "rank " << r;
  }
  EXPECT_TRUE(in[1][0].empty()) << "nothing copied";
  EXPECT_EQ(counters[0].injected, 1u);
  EXPECT_EQ(counters[0].detected, 1u);
  EXPECT_EQ(counters[0].retransmitted, 1u);
  EXPECT_EQ(counters[1].injected, 0u);
}

// The two-shot all-reduce (from kWindowTwoShotRanks ranks and kWindowTwoShotBytes) publishes the reduced
// columns in a second exchange, step 1: an injection keyed there hits it (from each of the N - 1
// publishers), detected and re-read, the result exact; a one-shot (a smaller size, or 2 ranks) has no step 1.
TEST(WindowExchange, TwoShotSecondExchangeIsStepOne) {
  for (int n : {2, 3}) {
    for (size_t count : {kWindowTwoShotBytes / 4 + 1001, kWindowTwoShotBytes / 4 - 1}) {
      Options o = testing::quietOptions();
      o.fault.mode = FaultMode::kBitFlip;
      o.fault.schedule = {{1, 1, 0, 0}};  // collective 1, step 1, chunk 0, read by rank 0
      LoopbackGroup g(n, o, Wire::kWindows);
      for (int i = 0; i < 2; ++i) {
        g.run([&](int rank, Communicator& c) {
          std::vector<int32_t> x = ramp(rank, count);
          ASSERT_TRUE(c.allreduce(x.data(), x.data(), count, DataType::kInt32, ReduceOp::kSum).isOk());
          EXPECT_EQ(x, rampSum(n, count));
        });
      }
      const Counters c = g.totalCounters();
      const bool twoShot = windowAllreduceTwoShot(n, count * 4);
      EXPECT_EQ(twoShot, n >= 3 && count * 4 >= kWindowTwoShotBytes);
      EXPECT_EQ(c.injected, twoShot ? uint64_t(n - 1) : 0u) << "np" << n << " count " << count;
      EXPECT_EQ(c.detected, c.injected) << "np" << n << " count " << count;
      EXPECT_EQ(c.controlFrames, 0u) << "np" << n << " count " << count;
    }
  }
}

// A reduced column corrupt on every read: every rank returns the reader's kCorruption, word for word, naming
// the column's publisher and the exchange.
TEST(WindowExchange, TwoShotPersistentCorruptionIsTheSameErrorOnEveryRank) {
  Options o = testing::quietOptions();
  o.maxRetries = 2;
  o.fault.schedule = {{0, 1, 0, 2}};  // collective 0, step 1, chunk 0, read by rank 2
  o.fault.repeat = 10;
  LoopbackGroup g(3, o, Wire::kWindows);
  std::vector<Status> results(3);
  const size_t count = kWindowTwoShotBytes / 4 + 7;
  g.run([&](int rank, Communicator& c) {
    std::vector<int32_t> x = ramp(rank, count);
    results[size_t(rank)] = c.allreduce(x.data(), x.data(), count, DataType::kInt32, ReduceOp::kSum);
  });
  expectTheSameErrorOnEveryRank(results, StatusCode::kCorruption,
                                {"allreduce seq 0 on rank 2: chunk 0 of rank 0's window (step 1)"});
}

// Non-integer values, so the order of the reductions shows in the bits: the one-shot and the two-shot over
// the windows give the ring's bits (the same hops in the same order for every column).
TEST(WindowExchange, AllreduceOnTheWindowsGivesTheRingsBits) {
  ReduceOp premul = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.3, &premul).isOk());
  struct Case {
    DataType t;
    ReduceOp op;
    size_t count;
  };
  const Case cases[] = {{DataType::kFloat32, ReduceOp::kSum, 3001},
                        {DataType::kFloat32, ReduceOp::kSum, kWindowTwoShotBytes / 4 + 1001},
                        {DataType::kFloat32, ReduceOp::kAvg, kWindowTwoShotBytes / 4 + 3},
                        {DataType::kFloat32, premul, kWindowTwoShotBytes / 4 + 555},
                        {DataType::kFloat64, ReduceOp::kProd, kWindowTwoShotBytes / 8 + 99},
                        {DataType::kBFloat16, ReduceOp::kSum, kWindowTwoShotBytes / 2 + 17}};
  for (int n : {2, 3, 5}) {
    LoopbackGroup ring(n, testing::quietOptions(), Wire::kLoopback);
    LoopbackGroup windows(n, testing::quietOptions(), Wire::kWindows);
    for (const Case& k : cases) {
      const size_t bytes = k.count * dataTypeSize(k.t);
      auto input = [&](int rank) {  // values in [0.5, 1.5) with all their mantissa bits
        std::mt19937 rng(uint32_t(rank * 7919 + int(k.count)));
        std::uniform_real_distribution<double> u(0.5, 1.5);
        std::vector<uint8_t> v(bytes);
        for (size_t i = 0; i < k.count; ++i) {
          const double d = u(rng);
          const float fl = float(d);
          uint32_t bits = 0;
          std::memcpy(&bits, &fl, 4);
          const uint16_t b16 = uint16_t(bits >> 16);
          if (k.t == DataType::kFloat64) std::memcpy(v.data() + i * 8, &d, 8);
          if (k.t == DataType::kFloat32) std::memcpy(v.data() + i * 4, &fl, 4);
          if (k.t == DataType::kBFloat16) std::memcpy(v.data() + i * 2, &b16, 2);
        }
        return v;
      };
      std::vector<std::vector<uint8_t>> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      for (auto* g : {&ring, &windows}) {
        auto& result = g == &ring ? want : got;
        g->run([&](int rank, Communicator& c) {
          std::vector<uint8_t> x = input(rank);
          ASSERT_TRUE(c.allreduce(x.data(), x.data(), k.count, k.t, k.op).isOk());
          result[size_t(rank)] = x;
        });
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(got[size_t(r)], want[size_t(r)])
            << "np" << n << " " << dataTypeName(k.t) << " " << reduceOpName(k.op) << " count " << k.count
            << " rank " << r;
        EXPECT_EQ(got[size_t(r)], got[0]) << "every rank agrees";
      }
    }
  }
}

// The window size must be the same on every rank; a transport without windows keeps the two-sided path.
TEST(WindowExchange, NoWindowsNoOneSidedRoute) {
  std::shared_ptr<LoopbackFabric> fabric;
  std::vector<std::unique_ptr<Transport>> t = makeLoopbackTransports(2, &fabric);
  testing::wrapInSharedMemory(&t, testing::kTestRingBytes);
  EXPECT_EQ(t[0]->windows(), nullptr);
  const Options o = testing::quietOptions();
  Counters counters;
  CollectiveContext ctx = testing::contextFor(t[0].get(), &o, &counters);
  HostExecutor exec;
  EXPECT_FALSE(runsOneSided(ctx, exec, 64));
}

// ---- single-copy reads (docs/design/protocol.md, "Single-copy read") ------------------------------------

// Rank r's all-gather block, published by address: the part table names the publisher's buffer (nothing
// copied into its window), each reader copies it straight into its output and checks it there; a read that
// injection damages is counted, re-read from the publisher's buffer, and the result exact.
TEST(SingleCopy, ReadersCopyStraightFromThePublishersBuffer) {
  std::shared_ptr<LoopbackFabric> fabric;
  std::vector<std::unique_ptr<Transport>> t = makeLoopbackTransports(2, &fabric);
  testing::wrapInSharedMemory(&t, testing::kTestRingBytes, testing::kTestWindowBytes,
                              testing::kTestSingleCopyBytes);
  const Options o = testing::quietOptions();
  FaultOptions f;
  f.mode = FaultMode::kBitFlip;
  f.schedule = {{0, 0, 1, 0}};  // collective 0, chunk 1, read by rank 0
  const FaultInjector injector(f);
  const size_t count = 5000, bytes = count * 4;  // chunks 0 and 1
  const std::vector<std::vector<int32_t>> x = {ramp(0, count), ramp(1, count)};
  const Fingerprint fp = makeFingerprint(CollectiveKind::kAllgather, ReduceOp::kSum, DataType::kInt32, count,
                                         kNoRoot, IssueOrder{});
  std::vector<std::vector<int32_t>> got(2, std::vector<int32_t>(count, -1));
  std::vector<Counters> counters(2);
  std::vector<Status> st(2);
  testing::runRanks(2, [&](int r) {
    CollectiveContext ctx = testing::contextFor(t[size_t(r)].get(), &o, &counters[size_t(r)], 0, &injector);
    std::vector<EagerPayload> out(2);
    out[size_t(1 - r)] = EagerPayload{x[size_t(r)].data(), bytes};
    std::vector<size_t> inBytes(2, 0);
    inBytes[size_t(1 - r)] = bytes;
    std::vector<uint8_t*> into(2, nullptr);
    into[size_t(1 - r)] = reinterpret_cast<uint8_t*>(got[size_t(r)].data());
    std::vector<std::vector<uint8_t>> in;
    st[size_t(r)] = windowExchange(ctx, fp, out, inBytes, &in, WindowReads{&into});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[size_t(r)].isOk()) << st[size_t(r)].toString();
    const int p = 1 - r;
    EXPECT_EQ(got[size_t(r)], x[size_t(p)]) << "rank " << r;
    const PartEntry part = t[size_t(r)]->windows()->part(p, 1, r);  // epoch 1
    EXPECT_EQ(part.address, uint64_t(uintptr_t(x[size_t(p)].data())))
        << "rank " << p << " published by address";
  }
  EXPECT_EQ(counters[0].injected, 1u);
  EXPECT_EQ(counters[0].detected, 1u);
  EXPECT_EQ(counters[0].retransmitted, 1u);
  EXPECT_EQ(counters[1].injected, 0u);
  EXPECT_EQ(counters[1].slicesVerified, 2u);
}

// Below the size from which a rank publishes by address, parts go through the window as before; the same
// collective can hold both (all-to-all blocks of different sizes).
TEST(SingleCopy, SmallPartsStillGoThroughTheWindow) {
  LoopbackGroup g(3, testing::quietOptions(), Wire::kSingleCopy);
  const Counters before = g.totalCounters();
  g.run([&](int rank, Communicator& c) {
    // Rank r sends 10 elements (40 bytes: through the window) to its left, 1000 (by address) to its right.
    std::vector<size_t> sc(3, 0), rc(3, 0), sd(3, 0), rd(3, 0);
    const int right = (rank + 1) % 3, left = (rank + 2) % 3;
    sc[size_t(left)] = 10;
    sc[size_t(right)] = 1000;
    rc[size_t(right)] = 10;
    rc[size_t(left)] = 1000;
    size_t s = 0, r = 0;
    for (int p = 0; p < 3; ++p) {
      sd[size_t(p)] = s;
      rd[size_t(p)] = r;
      s += sc[size_t(p)];
      r += rc[size_t(p)];
    }
    std::vector<int32_t> in(s), out(r, -1);
    for (size_t i = 0; i < s; ++i) in[i] = int32_t(rank * 100000 + int(i));
    ASSERT_TRUE(c.alltoallAsync(in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32)->wait().isOk());
    for (int p : {left, right}) {
      for (size_t i = 0; i < rc[size_t(p)]; ++i) {
        // p's block for this rank starts at p's displacement for it: the sum of p's blocks for lower ranks.
        size_t from = 0;
        for (int q = 0; q < rank; ++q) from += q == (p + 2) % 3 ? 10 : q == (p + 1) % 3 ? 1000 : 0;
        ASSERT_EQ(out[rd[size_t(p)] + i], int32_t(p * 100000 + int(from + i))) << rank << " from " << p;
      }
    }
  });
  EXPECT_EQ(g.totalCounters().since(before).controlFrames, 0u);
}

// A chunk corrupt on every single-copy read: every rank returns the reader's kCorruption, word for word.
TEST(SingleCopy, PersistentCorruptionIsTheSameErrorOnEveryRank) {
  Options o = testing::quietOptions();
  o.maxRetries = 2;
  o.fault.schedule = {FaultScheduleEntry{0, 0, 0, 1}};  // collective 0, chunk 0, read by rank 1
  o.fault.repeat = 10;
  LoopbackGroup g(3, o, Wire::kSingleCopy);
  std::vector<Status> results(3);
  g.run([&](int rank, Communicator& c) {
    const std::vector<int32_t> x = ramp(rank, 1000);
    std::vector<int32_t> all(3000);
    results[size_t(rank)] = c.allgather(x.data(), all.data(), 1000, DataType::kInt32);
  });
  expectTheSameErrorOnEveryRank(results, StatusCode::kCorruption,
                                {"allgather seq 0 on rank 1: chunk 0 of rank 0's window"});
}

// Nothing a peer publishes is believed: an address its process does not map is a kTransportError naming it
// (the kernel refuses the read, this process's memory is never touched), and a part by address where this
// rank cannot read peers' memory (no single-copy reads in the group) is one too.
TEST(SingleCopy, AnAddressThatCannotBeReadIsAnErrorNamingThePeer) {
  for (bool crossReadable : {true, false}) {
    std::shared_ptr<LoopbackFabric> fabric;
    std::vector<std::unique_ptr<Transport>> t = makeLoopbackTransports(2, &fabric);
    testing::wrapInSharedMemory(&t, testing::kTestRingBytes, testing::kTestWindowBytes,
                                crossReadable ? testing::kTestSingleCopyBytes : 0);
    Windows& w = *t[1]->windows();
    ASSERT_EQ(w.crossReadable(), crossReadable);
    const Options o = testing::quietOptions();
    const Fingerprint fp = makeFingerprint(CollectiveKind::kAllgather, ReduceOp::kSum, DataType::kInt32, 256,
                                           kNoRoot, IssueOrder{});
    HalfHeader& h = w.half(0, 1);
    h.seal.fingerprint = fp;
    h.seal.declined = 0;
    h.seal.crc = crc32(&h.seal, offsetof(HalfSeal, crc));
    w.part(0, 1, 1) = PartEntry{0, 1024, 0, 4096};  // the first page: never mapped
    w.chunk(0, 1, 0).epoch.store(1, std::memory_order_release);
    h.epoch.store(1, std::memory_order_release);

    Counters counters;
    CollectiveContext ctx = testing::contextFor(t[1].get(), &o, &counters);
    ctx.name = "allgather";
    std::vector<int32_t> x(256, 1), got(256, -1);
    std::vector<EagerPayload> out{EagerPayload{x.data(), 1024}, EagerPayload{}};
    std::vector<uint8_t*> into{reinterpret_cast<uint8_t*>(got.data()), nullptr};
    std::vector<std::vector<uint8_t>> in;
    const Status st = windowExchange(ctx, fp, out, {1024, 0}, &in, WindowReads{&into});
    EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
    const std::string want = crossReadable ? "single-copy read of 1024 bytes at 0x1000 in rank 0's process"
                                           : "rank 0's window gives this rank 1024 bytes at address 4096";
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    EXPECT_EQ(got, std::vector<int32_t>(256, -1)) << "nothing landed";
  }
}

// ---- send/recv on the windows (algorithms/window_sendrecv.h) ------------------------------------------

// A peer that never comes: a send waits for its acknowledgement, a receive for the message, each ending at
// the timeout naming the peer (the waits are pollUntil's).
TEST(WindowSendRecv, AnAbsentPeerIsATimeoutNamingIt) {
  Options o = testing::quietOptions();
  o.timeout = std::chrono::milliseconds(300);
  for (Wire wire : {Wire::kWindows, Wire::kSingleCopy})
    for (bool sending : {true, false}) {
      SCOPED_TRACE(testing::wireName(wire));
      LoopbackGroup g(2, o, wire);  // 400 bytes: single-copy over kSingleCopy
      std::vector<float> buf(100, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      const Status st =
          sending ? g.comm(0).sendRecvAsync(buf.data(), 100, 1, nullptr, 0, -1, DataType::kFloat32)->wait()
                  : g.comm(0).sendRecvAsync(nullptr, 0, -1, buf.data(), 100, 1, DataType::kFloat32)->wait();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
      EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
      const std::string want =
          sending ? "rank 1 to take the sendrecv message from its slot" : "the sendrecv message from rank 1";
      EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    }
}

// Nothing in a slot sizes a read: a sender whose (sealed, matching) fingerprint names more than a slot holds
// is not believed, and nothing past the slot is read.
TEST(WindowSendRecv, AFingerprintLargerThanTheSlotIsAnErrorNamingTheSender) {
  std::shared_ptr<LoopbackFabric> fabric;
  std::vector<std::unique_ptr<Transport>> t = makeLoopbackTransports(2, &fabric);
  testing::wrapInSharedMemory(&t, testing::kTestRingBytes, testing::kTestWindowBytes);
  Windows& w = *t[1]->windows();
  const size_t count = w.layout().slotCapacity / 4 + 1;
  // Rank 0's "message" 0 to rank 1: the fingerprint sendRecv expects for `count` floats, in its slot.
  SlotHeader& h = w.slot(0, 1);
  SlotSeal seal;
  std::memset(static_cast<void*>(&seal), 0, sizeof seal);
  seal.fingerprint = makeFingerprint(CollectiveKind::kSendRecv, ReduceOp::kSum, DataType::kFloat32, count, 0,
                                     IssueOrder{0, 0, 0});
  seal.crc = crc32(&seal, offsetof(SlotSeal, crc));
  std::memcpy(static_cast<void*>(&h.seal), &seal, sizeof seal);
  h.message.store(1, std::memory_order_release);

  const Options o = testing::quietOptions();
  Counters counters;
  CollectiveContext ctx = testing::contextFor(t[1].get(), &o, &counters);
  HostExecutor exec;
  std::vector<float> in(count, 0.0f);
  PeerExchange x;
  x.src = 0;
  x.recv = in.data();
  x.recvCount = count;
  const Status st = sendRecv(ctx, &exec, x, DataType::kFloat32);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("rank 0 published " + std::to_string(count * 4) + " bytes in a slot of " +
                              std::to_string(w.layout().slotCapacity)),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace ringguard
