// Small collectives in one round (docs/design/protocol.md, "Small collectives in one round"), over the
// loopback transport: exact results for every dtype and op, bit-identical to the pipeline on random floats,
// every fault mode repaired with detected == injected, damaged frames repaired, persistent damage and
// mismatches the same error on every rank, and frames a hostile peer made up rejected naming it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/eager.h"
#include "core/trailer.h"
#include "executor/host_executor.h"
#include "loopback_util.h"
#include "ringguard/core/crc32.h"
#include "transport/loopback/loopback_transport.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::LoopbackGroup;
using testing::makeInput;

enum class Kind { kAllreduce, kReduceScatter, kAllgather, kBroadcast };
constexpr Kind kKinds[] = {Kind::kAllreduce, Kind::kReduceScatter, Kind::kAllgather, Kind::kBroadcast};
const char* kindName(Kind k) {
  static const char* const kNames[] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};
  return kNames[int(k)];
}
bool reduces(Kind k) { return k == Kind::kAllreduce || k == Kind::kReduceScatter; }

Options defaults() {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// One collective of `count` elements per rank's block (allreduce, broadcast: the whole buffer;
// reduce-scatter: the output; all-gather: the input) with `in` as this rank's input; returns the output (the
// whole buffer in place). The root of a broadcast is the last rank.
struct Call {
  Kind kind;
  DataType dtype;
  ReduceOp op = ReduceOp::kSum;
  size_t count;
  bool inPlace = false;
};
size_t inputElems(const Call& c, int n) {
  return c.kind == Kind::kReduceScatter ? c.count * size_t(n) : c.count;
}
size_t outputElems(const Call& c, int n) {
  return c.kind == Kind::kAllgather ? c.count * size_t(n) : c.count;
}

Status run(Communicator& comm, const Call& c, const std::vector<uint8_t>& input,
           std::vector<uint8_t>* output) {
  const int n = comm.size(), me = comm.rank();
  const size_t esize = dataTypeSize(c.dtype);
  std::vector<uint8_t> buf = input;
  if (c.kind == Kind::kAllgather) {
    buf.assign(outputElems(c, n) * esize, 0);
    std::memcpy(buf.data() + size_t(me) * c.count * esize, input.data(), input.size());
  }
  std::vector<uint8_t> out(outputElems(c, n) * esize, 0xEE);
  Status st;
  switch (c.kind) {
    case Kind::kAllreduce:
      st = c.inPlace ? comm.allreduce(buf.data(), buf.data(), c.count, c.dtype, c.op)
                     : comm.allreduce(input.data(), out.data(), c.count, c.dtype, c.op);
      break;
    case Kind::kReduceScatter:
      st = c.inPlace ? comm.reduceScatterAsync(buf.data(), buf.data() + size_t(me) * c.count * esize, c.count,
                                               c.dtype, c.op)
                           ->wait()
                     : comm.reduceScatterAsync(input.data(), out.data(), c.count, c.dtype, c.op)->wait();
      if (c.inPlace)
        out.assign(buf.begin() + long(size_t(me) * c.count * esize),
                   buf.begin() + long(size_t(me + 1) * c.count * esize));
      break;
    case Kind::kAllgather:
      st = c.inPlace
               ? comm.allgatherAsync(buf.data() + size_t(me) * c.count * esize, buf.data(), c.count, c.dtype)
                     ->wait()
               : comm.allgatherAsync(input.data(), out.data(), c.count, c.dtype)->wait();
      break;
    case Kind::kBroadcast:
      st = c.inPlace ? comm.broadcastAsync(buf.data(), buf.data(), c.count, c.dtype, n - 1)->wait()
                     : comm.broadcastAsync(input.data(), out.data(), c.count, c.dtype, n - 1)->wait();
      break;
  }
  if (c.inPlace && c.kind != Kind::kReduceScatter) out = buf;
  *output = out;
  return st;
}

// The closed form of `c` on rank `me` with makeInput's inputs.
std::vector<uint8_t> expected(const Call& c, int n, int me) {
  const size_t esize = dataTypeSize(c.dtype);
  switch (c.kind) {
    case Kind::kAllreduce:
      return expectedResult(c.dtype, c.op, n, c.count);
    case Kind::kReduceScatter: {
      const std::vector<uint8_t> full = expectedResult(c.dtype, c.op, n, c.count * size_t(n));
      return std::vector<uint8_t>(full.begin() + long(size_t(me) * c.count * esize),
                                  full.begin() + long(size_t(me + 1) * c.count * esize));
    }
    case Kind::kAllgather: {
      std::vector<uint8_t> out;
      for (int r = 0; r < n; ++r) {
        const std::vector<uint8_t> b = makeInput(c.dtype, ReduceOp::kSum, r, c.count);
        out.insert(out.end(), b.begin(), b.end());
      }
      return out;
    }
    case Kind::kBroadcast:
      return makeInput(c.dtype, ReduceOp::kSum, n - 1, c.count);
  }
  return {};
}

std::vector<uint8_t> inputOf(const Call& c, int n, int rank) {
  return makeInput(c.dtype, reduces(c.kind) ? c.op : ReduceOp::kSum, rank, inputElems(c, n));
}

// Runs `c` on every rank of `g` and checks each result against its closed form.
void runAndCheck(LoopbackGroup& g, const Call& c) {
  const int n = g.size();
  g.run([&](int rank, Communicator& comm) {
    std::vector<uint8_t> out;
    const Status st = run(comm, c, inputOf(c, n, rank), &out);
    const std::string w = std::string(kindName(c.kind)) + " " + dataTypeName(c.dtype) + " op " +
                          reduceOpName(c.op) + " count " + std::to_string(c.count) +
                          (c.inPlace ? " in place" : "") + " rank " + std::to_string(rank) + " of " +
                          std::to_string(n);
    ASSERT_TRUE(st.isOk()) << w << ": " << st.toString();
    EXPECT_EQ(out, expected(c, n, rank)) << w;
  });
}

// ---- results ------------------------------------------------------------------------------------------

class EagerCollectives : public ::testing::TestWithParam<int> {};

TEST_P(EagerCollectives, EveryCollectiveDtypeAndOpInOneRound) {
  const int n = GetParam();
  LoopbackGroup g(n, defaults());
  uint64_t collectives = 0, payloadFrames = 0;
  for (Kind k : kKinds) {
    for (DataType t : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        if (reduces(k) ? !reduceSupported(t, op) : op != ReduceOp::kSum) continue;
        for (size_t count : {size_t(1), size_t(7), size_t(301)}) {
          for (bool inPlace : {false, true}) {
            runAndCheck(g, Call{k, t, op, count, inPlace});
            ++collectives;
            // Payload frames received per rank: from every peer, but a broadcast's only from the root.
            payloadFrames += k == Kind::kBroadcast ? uint64_t(n - 1) : uint64_t(n * (n - 1));
          }
        }
      }
    }
  }
  const Counters c = g.totalCounters();
  // One round: every payload arrives in a fingerprint frame (no ring slice moves), and a fault-free
  // collective sends its fingerprint frame and its verdict to every peer: 2 (N - 1) frames per rank.
  EXPECT_EQ(c.slicesVerified, payloadFrames);
  EXPECT_EQ(c.controlFrames, collectives * uint64_t(n) * 2 * uint64_t(n - 1));
  EXPECT_EQ(c.detected, 0u);
  EXPECT_EQ(c.repairRounds, 0u);
}

INSTANTIATE_TEST_SUITE_P(Ranks, EagerCollectives, ::testing::Values(2, 3));

// The pipeline where a payload exceeds one slice: the same bits as the one-round path, for sums of random
// floats (whose value depends on the order of the additions) and for avg and premul_sum.
TEST(EagerCollectives, BitIdenticalToThePipelineOnRandomFloats) {
  ReduceOp premul;
  ASSERT_TRUE(makePremulSum(0.37, &premul).isOk());
  for (int n : {2, 3}) {
    Options pipelined = defaults();
    pipelined.sliceBytes = 64;
    LoopbackGroup eager(n, defaults()), ring(n, pipelined);
    for (Kind k : {Kind::kAllreduce, Kind::kReduceScatter}) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16, DataType::kFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, premul}) {
          const Call c{k, t, op, 257, false};
          std::vector<std::vector<uint8_t>> inputs(static_cast<size_t>(n)), a(static_cast<size_t>(n)),
              b(static_cast<size_t>(n));
          std::mt19937 gen(uint32_t(n * 1000 + int(t) * 10 + int(k)));
          std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
          for (int r = 0; r < n; ++r) {
            std::vector<float> f(inputElems(c, n));
            for (float& x : f) x = dist(gen);
            std::vector<uint8_t>& in = inputs[size_t(r)];
            in.resize(f.size() * dataTypeSize(t));
            for (size_t i = 0; i < f.size(); ++i) {  // each dtype's bits from the float (f16/bf16: truncated)
              if (t == DataType::kFloat32) std::memcpy(in.data() + 4 * i, &f[i], 4);
              if (t == DataType::kFloat64) {
                const double d = double(f[i]) / 3.0;
                std::memcpy(in.data() + 8 * i, &d, 8);
              }
              if (t == DataType::kBFloat16 || t == DataType::kFloat16) {
                uint32_t bits;
                std::memcpy(&bits, &f[i], 4);
                const uint16_t h =
                    t == DataType::kBFloat16 ? uint16_t(bits >> 16) : uint16_t(0x3C00 + (bits >> 20 & 0x3FF));
                std::memcpy(in.data() + 2 * i, &h, 2);
              }
            }
          }
          eager.run([&](int r, Communicator& comm) {
            ASSERT_TRUE(run(comm, c, inputs[size_t(r)], &a[size_t(r)]).isOk());
          });
          ring.run([&](int r, Communicator& comm) {
            ASSERT_TRUE(run(comm, c, inputs[size_t(r)], &b[size_t(r)]).isOk());
          });
          for (int r = 0; r < n; ++r) {
            EXPECT_EQ(a[size_t(r)], b[size_t(r)]) << kindName(k) << " " << dataTypeName(t) << " "
                                                  << reduceOpName(op) << " rank " << r << " of " << n;
          }
        }
      }
    }
    // The two groups took different paths: one payload frame per peer against ring slices.
    EXPECT_EQ(eager.totalCounters().repairRounds, 0u);
    EXPECT_GT(ring.totalCounters().slicesVerified, eager.totalCounters().slicesVerified);
  }
}

// ---- faults -------------------------------------------------------------------------------------------

class EagerFaults : public ::testing::TestWithParam<FaultMode> {};

TEST_P(EagerFaults, EveryModeRepairedBitIdentical) {
  for (int n : {2, 3}) {
    Options o = defaults();
    o.maxRetries = 3;
    o.fault.mode = GetParam();
    o.fault.probability = 0.3;
    o.fault.seed = 5;
    o.fault.delayMs = 1;
    LoopbackGroup g(n, o);
    for (int i = 0; i < 4; ++i) {
      for (Kind k : kKinds) {
        runAndCheck(
            g, Call{k, DataType::kFloat32, reduces(k) ? ReduceOp::kSum : ReduceOp::kSum, 333, i % 2 == 1});
        runAndCheck(g, Call{k, DataType::kInt64, reduces(k) ? ReduceOp::kMax : ReduceOp::kSum, 40, false});
      }
    }
    testing::expectEveryInjectionRepaired(g.totalCounters(), GetParam(), "np" + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EagerFaults, testing::payloadFaultModes(), testing::faultModeParamName);

// A damaged fingerprint frame (the control fault mode, one bit of the frame) carries a payload here: a link
// failure, repaired like a slice, where the pipeline's fingerprint frame would be a fatal error.
TEST(EagerFaults, ADamagedFrameIsRepaired) {
  for (int n : {2, 3}) {
    for (int sender = 0; sender < n; ++sender) {
      const int receiver = (sender + 1) % n;
      Options o = defaults();
      o.fault.mode = FaultMode::kControl;
      o.fault.schedule = {{1, int(ControlTag::kFingerprint), sender, receiver}};  // frame #1: collective 1
      LoopbackGroup g(n, o);
      for (Kind k : kKinds) runAndCheck(g, Call{k, DataType::kInt32, ReduceOp::kSum, 100, false});
      const Counters c = g.totalCounters();
      EXPECT_EQ(c.injected, 1u) << sender << " -> " << receiver << " of " << n;
      EXPECT_EQ(c.detected, 1u);
      EXPECT_EQ(c.retransmitted, 1u);
      EXPECT_EQ(c.repairRounds, uint64_t(n));  // every rank takes part in the repair round
    }
  }
}

// Damage on every attempt: every rank ends with the same kCorruption naming the link.
TEST(EagerFaults, PersistentDamageIsTheSameErrorOnEveryRank) {
  for (Kind k : kKinds) {
    Options o = defaults();
    o.maxRetries = 2;
    o.fault.schedule = {FaultScheduleEntry{0, 0, 0, 1}};  // collective 0, step 0, slice 0, into rank 1
    o.fault.repeat = 10;
    LoopbackGroup g(3, o);
    std::vector<Status> results(3);
    const Call c{k, DataType::kInt32, ReduceOp::kSum, 50, false};
    g.run([&](int rank, Communicator& comm) {
      std::vector<uint8_t> out;
      results[size_t(rank)] = run(comm, c, inputOf(c, 3, rank), &out);
    });
    // Into rank 1 from rank 0 (and from rank 2 too unless it is a broadcast, whose root, rank 2, sends
    // alone).
    const std::string link = k == Kind::kBroadcast ? "link 2 -> 1, step 0, slice 0, column 2"
                                                   : "link 0 -> 1, step 0, slice 0, column 0";
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(results[size_t(r)].code(), StatusCode::kCorruption)
          << kindName(k) << " rank " << r << ": " << results[size_t(r)].toString();
      EXPECT_EQ(results[size_t(r)].message(), results[0].message()) << kindName(k);
    }
    EXPECT_NE(results[0].message().find(
                  std::string(kindName(k)) +
                  " seq 0: slice still failing verification after 2 retransmission(s): " + link),
              std::string::npos)
        << results[0].message();
  }
}

// ---- mismatches and hostile peers ----------------------------------------------------------------------

// One rank with a small count (one round), the others with a large one (the pipeline): the fingerprint
// frames still meet, and every rank reports the same mismatch naming both counts.
TEST(EagerErrors, ASmallAndALargeCollectiveAreAMismatchOnEveryRank) {
  for (int n : {2, 3}) {
    for (int small = 0; small < n; ++small) {
      LoopbackGroup g(n, defaults());
      std::vector<Status> results(static_cast<size_t>(n));
      g.run([&](int rank, Communicator& comm) {
        const size_t count = rank == small ? 10 : 100000;
        std::vector<float> v(count, 1.0f);
        results[size_t(rank)] = comm.allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum);
      });
      const std::string lowCount = small == 0 ? "count=10" : "count=100000";
      const std::string diffCount = small == 0 ? "count=100000" : "count=10";
      const int diff = small == 0 ? 1 : small;
      const std::string want = "collective fingerprint mismatch: rank 0 has {allreduce op=sum dtype=f32 " +
                               lowCount + " seq=0}, rank " + std::to_string(diff) +
                               " has {allreduce op=sum dtype=f32 " + diffCount + " seq=0}";
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(results[size_t(r)].code(), StatusCode::kFingerprintMismatch)
            << results[size_t(r)].toString();
        EXPECT_EQ(results[size_t(r)].message(), want)
            << "rank " << r << " of " << n << ", small rank " << small;
      }
    }
  }
}

// Rank 0 runs the collective; the test plays rank 1 and sends frames of its own making.
class HostilePeer : public ::testing::Test {
 protected:
  void SetUp() override {
    transports_ = makeLoopbackTransports(2, &fabric_);
    options_ = defaults();
    options_.timeout = std::chrono::milliseconds(3000);
    options_.sliceBytes = size_t(1) << 20;  // as a communicator resolves it
    ctx_.transport = transports_[0].get();
    ctx_.options = &options_;
    ctx_.counters = &counters_;
    ctx_.name = "allreduce";
  }
  // Rank 1's fingerprint frame for an allreduce of `count` i32 carrying `payload` (its EagerHeader says
  // `claimed` bytes).
  std::vector<uint8_t> frame(size_t count, const std::vector<uint8_t>& payload, uint32_t claimed) {
    std::vector<uint8_t> b;
    auto add = [&](const void* p, size_t n) {
      b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    };
    const DisseminationHeader h{0, 0, 0};
    const int32_t low = 1, diff = -1;
    const Fingerprint fp = makeAllreduceFingerprint(ReduceOp::kSum, DataType::kInt32, count, IssueOrder{});
    const Fingerprint none{};
    const EagerHeader e{kEagerMagic, claimed};
    const Trailer t = makeTrailer(SliceId{0, 0, 0, 1, uint32_t(payload.size()), 0},
                                  crc32(payload.data(), payload.size()), 0);
    add(&h, sizeof h);
    add(&low, 4);
    add(&diff, 4);
    add(&fp, sizeof fp);
    add(&none, sizeof none);
    add(&e, sizeof e);
    add(&t, sizeof t);
    add(payload.data(), payload.size());
    return b;
  }
  Status runRank0(size_t count) {
    std::vector<int32_t> v(count, 1);
    HostExecutor exec;
    return allreduce(ctx_, &exec, v.data(), v.data(), count, DataType::kInt32, ReduceOp::kSum);
  }

  std::shared_ptr<LoopbackFabric> fabric_;
  std::vector<std::unique_ptr<Transport>> transports_;
  Options options_;
  Counters counters_;
  CollectiveContext ctx_;
};

TEST_F(HostilePeer, APayloadOfAnotherSizeIsAnErrorNamingThePeer) {
  const std::vector<uint8_t> payload(12, 7);  // 3 elements where 4 are agreed
  const std::vector<uint8_t> f = frame(4, payload, uint32_t(payload.size()));
  ASSERT_TRUE(transports_[1]->control()->send(0, ControlTag::kFingerprint, f.data(), f.size()).isOk());
  const Status st = runRank0(4);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_EQ(st.message(),
            "allreduce seq 0: rank 1 sent 12 payload bytes in its fingerprint frame, 16 expected");
}

TEST_F(HostilePeer, AHeaderThatDoesNotMatchTheFrameIsAnErrorNamingThePeer) {
  const std::vector<uint8_t> payload(16, 7);
  const std::vector<uint8_t> f = frame(4, payload, 4096);  // claims more than the frame holds
  ASSERT_TRUE(transports_[1]->control()->send(0, ControlTag::kFingerprint, f.data(), f.size()).isOk());
  const Status st = runRank0(4);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("malformed fingerprint frame from rank 1"), std::string::npos) << st.message();
}

TEST_F(HostilePeer, AVerdictEntryOutsideTheExchangeIsAnErrorNamingThePeer) {
  const std::vector<uint8_t> payload(16, 7);
  const std::vector<uint8_t> f = frame(4, payload, 16);
  ASSERT_TRUE(transports_[1]->control()->send(0, ControlTag::kFingerprint, f.data(), f.size()).isOk());
  // Rank 1's verdict names a ring slice (step 3) that this exchange does not have.
  std::vector<uint8_t> v;
  const DisseminationHeader h{0, 0, 0};
  const uint32_t count = 1, pad = 0;
  SliceFailure bad;
  bad.column = 0;
  bad.step = 3;
  bad.sender = 0;
  bad.receiver = 1;
  bad.reason = uint8_t(SliceCheck::kCorrupt);
  for (auto [p, n] :
       {std::pair<const void*, size_t>{&h, sizeof h}, {&count, 4}, {&pad, 4}, {&bad, sizeof bad}}) {
    v.insert(v.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  }
  ASSERT_TRUE(transports_[1]->control()->send(0, ControlTag::kVerdict, v.data(), v.size()).isOk());
  const Status st = runRank0(4);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("verdict entry from rank 1 rejected (link 0 -> 1, step 3, slice 0, column 0)"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace ringguard
