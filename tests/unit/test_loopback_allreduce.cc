// The verified ring AllReduce in one process: ranks 1..8 over the loopback transport, every dtype and op,
// counts {0, 1, 7, N-1, N+1, non-divisible, ~1e5 in many slices}, in and out of place, against the closed
// forms of verifiable.h; then every fault mode, by schedule and by probability, with exact counters.
#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <vector>

#include "loopback_util.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::LoopbackGroup;
using testing::makeInput;

Options baseOptions(size_t sliceBytes) {
  Options o;
  o.sliceBytes = sliceBytes;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

std::string label(DataType t, ReduceOp op, size_t count, bool inPlace) {
  return std::string(dataTypeName(t)) + " " + reduceOpName(op) + " count=" + std::to_string(count) +
         (inPlace ? " in place" : " out of place");
}

// One allreduce on every rank of `g`; each rank's result must equal the closed form byte for byte.
void allreduceAndCheck(LoopbackGroup& g, DataType t, ReduceOp op, size_t count, bool inPlace) {
  const int n = g.size();
  const std::vector<uint8_t> expected = expectedResult(t, op, n, count);
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(t, op, rank, count);
    std::vector<uint8_t> out(in.size() + 1, 0xAB);  // +1: never a zero-sized buffer
    Status st = inPlace ? c.allreduce(in.data(), in.data(), count, t, op)
                        : c.allreduce(in.data(), out.data(), count, t, op);
    ASSERT_TRUE(st.isOk()) << label(t, op, count, inPlace) << " rank " << rank << ": " << st.toString();
    const uint8_t* result = inPlace ? in.data() : out.data();
    EXPECT_EQ(std::vector<uint8_t>(result, result + expected.size()), expected)
        << label(t, op, count, inPlace) << " rank " << rank;
    if (!inPlace) {
      EXPECT_EQ(in, makeInput(t, op, rank, count)) << "out of place modified the input";
      EXPECT_EQ(out[expected.size()], 0xAB) << "wrote past the result";
    }
  });
}

class LoopbackAllreduce : public ::testing::TestWithParam<int> {};

TEST_P(LoopbackAllreduce, EveryDtypeOpAndCount) {
  const int n = GetParam();
  // 64-byte slices: the counts above 16 elements already span several slices per column.
  LoopbackGroup g(n, baseOptions(64));
  const std::vector<size_t> counts = {0, 1, 7, size_t(n) - 1, size_t(n) + 1, 1001};
  uint64_t pairs = 0;
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(t, op)) continue;  // LoopbackAllreduceOps: the refusals
      ++pairs;
      for (size_t count : counts) {
        for (bool inPlace : {false, true}) allreduceAndCheck(g, t, op, count, inPlace);
      }
    }
  }
  const Counters total = g.totalCounters();
  EXPECT_EQ(total.detected, 0u);
  EXPECT_EQ(total.injected, 0u);
  EXPECT_EQ(total.collectives, uint64_t(n) * pairs * counts.size() * 2);
}

TEST_P(LoopbackAllreduce, PremulSumEveryFloatingAndComplexDtype) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "premul_sum needs 2 or more ranks (LoopbackAllreduceOps.PremulSumOnOneRank)";
  LoopbackGroup g(n, baseOptions(64));
  for (double factor : {0.5, 0.25, 2.0}) {
    ReduceOp op = ReduceOp::kSum;
    ASSERT_TRUE(makePremulSum(factor, &op).isOk());
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                       DataType::kComplex64, DataType::kComplex128}) {
      for (size_t count : {size_t(0), size_t(1), size_t(n) + 1, size_t(1001)}) {
        for (bool inPlace : {false, true}) allreduceAndCheck(g, t, op, count, inPlace);
      }
    }
  }
  EXPECT_EQ(g.totalCounters().detected, 0u);
}

TEST_P(LoopbackAllreduce, LargeCountInManySlices) {
  const int n = GetParam();
  // ~1e5 elements (prime, so no column or slice divides evenly) in 4 KiB slices: hundreds of items per
  // rank, with the receive slots reused many times over.
  LoopbackGroup g(n, baseOptions(4096));
  const size_t count = 100003;
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64, DataType::kUint8}) {
    allreduceAndCheck(g, t, ReduceOp::kSum, count, false);
  }
  allreduceAndCheck(g, DataType::kFloat64, ReduceOp::kAvg, count, true);
  allreduceAndCheck(g, DataType::kInt32, ReduceOp::kMax, count, true);
  allreduceAndCheck(g, DataType::kFloat16, ReduceOp::kProd, count, false);
  allreduceAndCheck(g, DataType::kFloat32, ReduceOp::kMin, count, true);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LoopbackAllreduce, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "np" + std::to_string(i.param);
                         });

// Ops a dtype does not take are refused on the caller's thread, naming the collective, the op and the dtype,
// and the other ranks fail at once instead of waiting.
TEST(LoopbackAllreduceOps, UnsupportedOpDtypePairsNameOpDtypeAndCollective) {
  ReduceOp premul = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &premul).isOk());
  const struct {
    DataType t;
    ReduceOp op;
    const char* says;
  } cases[] = {
      {DataType::kFloat32, ReduceOp::kBand,
       "op band does not reduce dtype f32: bitwise ops take integer and bool"},
      {DataType::kBFloat16, ReduceOp::kBxor, "op bxor does not reduce dtype bf16"},
      {DataType::kInt32, premul,
       "op premul_sum does not reduce dtype i32: premul_sum takes floating and complex"},
      {DataType::kBool, ReduceOp::kAvg, "op avg does not reduce dtype bool: avg is not defined on bool"},
      {DataType::kComplex64, ReduceOp::kMax,
       "op max does not reduce dtype c64: complex dtypes take sum, avg"},
      {DataType::kComplex128, ReduceOp::kProd, "op prod does not reduce dtype c128"},
      {DataType::kFloat8E4M3, ReduceOp::kSum,
       "op sum does not reduce dtype f8e4m3: float8 dtypes are copy-only"},
      {DataType::kFloat8E5M2, ReduceOp::kMax, "op max does not reduce dtype f8e5m2"},
      {DataType::kFloat32, ReduceOp::kPremulSum, "op premul_sum without a factor"},
  };
  for (const auto& c : cases) {
    LoopbackGroup g(2, baseOptions(64));  // an argument error poisons the communicators: a group per case
    g.run([&](int rank, Communicator& comm) {
      std::vector<uint8_t> buf(4 * dataTypeSize(c.t), 0);
      // Rank 0 passes the bad pair, rank 1 a good one: rank 1 must hear of it, not wait.
      const DataType t = rank == 0 ? c.t : DataType::kInt32;
      const ReduceOp op = rank == 0 ? c.op : ReduceOp::kSum;
      std::vector<uint8_t> other(4 * dataTypeSize(t), 0);
      const Status st = rank == 0 ? comm.allreduce(buf.data(), buf.data(), 4, t, op)
                                  : comm.allreduce(other.data(), other.data(), 4, t, op);
      ASSERT_FALSE(st.isOk()) << c.says;
      if (rank == 0) {
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(st.message().find("allreduce on rank 0"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
      }
    });
  }
}

TEST(LoopbackAllreduceOps, PremulSumOnOneRank) {
  ReduceOp premul = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &premul).isOk());
  LoopbackGroup g(1, baseOptions(64));
  g.run([&](int, Communicator& comm) {
    std::vector<float> v = {2, 4};
    const Status st = comm.allreduce(v.data(), v.data(), 2, DataType::kFloat32, premul);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("premul_sum on a single rank"), std::string::npos) << st.message();
  });
}

// Ranks whose premul_sum factors differ fail on every rank naming both factors (the fingerprint carries it).
TEST(LoopbackAllreduceOps, DifferentPremulFactorsNameBothSides) {
  ReduceOp half = ReduceOp::kSum, quarter = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  ASSERT_TRUE(makePremulSum(0.25, &quarter).isOk());
  LoopbackGroup g(3, baseOptions(64));
  g.run([&](int rank, Communicator& comm) {
    std::vector<float> v = {2, 4};
    const Status st = comm.allreduce(v.data(), v.data(), 2, DataType::kFloat32, rank == 2 ? quarter : half);
    EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << st.toString();
    EXPECT_NE(st.message().find("rank 0 has {allreduce op=premul_sum(0.5) dtype=f32 count=2"),
              std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("rank 2 has {allreduce op=premul_sum(0.25) dtype=f32 count=2"),
              std::string::npos)
        << st.message();
  });
}

// ---- fault injection -------------------------------------------------------------------------------

struct FaultCase {
  FaultMode mode;
  int ranks;
};

class LoopbackAllreduceFaults : public ::testing::TestWithParam<FaultCase> {};

// A few collectives with faults by probability and by schedule: results exact, every injected corruption
// detected and repaired, none escaped.
TEST_P(LoopbackAllreduceFaults, BitIdenticalAndEveryInjectionDetected) {
  const FaultCase fc = GetParam();
  Options o = baseOptions(256);
  o.fault.mode = fc.mode;
  o.fault.probability = 0.05;
  o.fault.seed = 7;
  o.fault.delayMs = 2;
  // Exact hits too: collective 1, step 0 slice 0 into rank 1, and the last step's slice 1 into rank 0.
  o.fault.schedule = {{1, 0, 0, 1}, {1, 2 * (fc.ranks - 1) - 1, 1, 0}};
  LoopbackGroup g(fc.ranks, o);
  const size_t counts[] = {1001, 4099, 77};
  const DataType types[] = {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16};
  for (int i = 0; i < 3; ++i) allreduceAndCheck(g, types[i], ReduceOp::kSum, counts[i], i == 1);
  const Counters total = g.totalCounters();
  if (fc.mode == FaultMode::kDelay) {
    EXPECT_GT(total.delayed, 0u);
    EXPECT_EQ(total.injected, 0u);
    EXPECT_EQ(total.detected, 0u);
  } else {
    EXPECT_GE(total.injected, 2u) << "the schedule alone injects two";
    EXPECT_EQ(total.detected, total.injected);
    EXPECT_GT(total.retransmitted, 0u);
    EXPECT_GT(total.repairRounds, 0u);
  }
  EXPECT_EQ(total.escaped, 0u);
  EXPECT_EQ(total.collectives, uint64_t(fc.ranks) * 3);
  for (const Counters& c : g.counters()) EXPECT_EQ(c.escaped, 0u);
}

// A corruption that outlasts the retries: the same kCorruption on every rank, and the communicator stays
// poisoned with it.
class LoopbackAllreducePersistent : public ::testing::TestWithParam<FaultCase> {};

TEST_P(LoopbackAllreducePersistent, SameCorruptionErrorOnEveryRank) {
  const FaultCase fc = GetParam();
  Options o = baseOptions(256);
  o.logLevel = "off";  // every rank logs the error it returns
  o.maxRetries = 2;
  o.fault.mode = fc.mode;
  o.fault.repeat = o.maxRetries + 1;
  o.fault.schedule = {{0, 1, 0, 1 % fc.ranks}};
  LoopbackGroup g(fc.ranks, o);
  const size_t count = 1001;
  std::vector<Status> first(size_t(fc.ranks)), later(size_t(fc.ranks));
  g.run([&](int rank, Communicator& c) {
    std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, rank, count), out(in.size());
    first[size_t(rank)] = c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
    later[size_t(rank)] = c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < fc.ranks; ++r) {
    EXPECT_EQ(first[size_t(r)].code(), StatusCode::kCorruption) << first[size_t(r)].toString();
    EXPECT_EQ(first[size_t(r)].message(), first[0].message()) << "rank " << r;
    EXPECT_EQ(later[size_t(r)].toString(), first[size_t(r)].toString()) << "poisoned with the first error";
  }
  EXPECT_NE(first[0].message().find("after 2 retransmission(s)"), std::string::npos) << first[0].message();
  EXPECT_NE(first[0].message().find("step 1, slice 0"), std::string::npos) << first[0].message();
  const Counters total = g.totalCounters();
  EXPECT_EQ(total.injected, uint64_t(o.maxRetries + 1));
  EXPECT_EQ(total.detected, total.injected);
  EXPECT_EQ(total.escaped, 0u);
}

std::vector<FaultCase> faultCases(bool withDelay) {
  std::vector<FaultCase> out;
  for (FaultMode m : {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst, FaultMode::kGarbage,
                      FaultMode::kTrailer, FaultMode::kRetransmit, FaultMode::kDelay}) {
    if (m == FaultMode::kDelay && !withDelay) continue;
    for (int n : {2, 3, 5}) out.push_back({m, n});
  }
  out.push_back({FaultMode::kBitFlip, 8});
  out.push_back({FaultMode::kRetransmit, 8});
  return out;
}

std::string caseName(const ::testing::TestParamInfo<FaultCase>& i) {
  return std::string(faultModeName(i.param.mode)) + "_np" + std::to_string(i.param.ranks);
}

INSTANTIATE_TEST_SUITE_P(Modes, LoopbackAllreduceFaults, ::testing::ValuesIn(faultCases(true)), caseName);
INSTANTIATE_TEST_SUITE_P(Modes, LoopbackAllreducePersistent, ::testing::ValuesIn(faultCases(false)),
                         caseName);

}  // namespace
}  // namespace ringguard
