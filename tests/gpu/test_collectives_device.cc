// Every collective besides allreduce on device memory, under mpirun: the ranks share the one GPU through
// the host-staged transport (or, with RINGGUARD_DEVICE_TRANSPORT=nccl and one rank, NCCL to itself). The
// checks are tests/mpi's (collective_checks.h) over device buffers on a caller stream; with fault
// injection every corruption is detected and repaired, bit for bit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "../mpi/collective_checks.h"
#include "device_comm_util.h"
#include "device_memory.h"

namespace ringguard {
namespace {

using testing::DeviceMemory;
using testing::everyCollective;
using testing::makeDeviceComm;
using testing::sumOverRanks;

TEST(DeviceCollectives, EveryCollectiveDtypeAndCount) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  Options o;
  o.sliceBytes = 4096;
  auto comm = makeDeviceComm(o);
  DeviceMemory mem;
  for (DataType t : kAllDataTypes) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(100003)}) {
      everyCollective(*comm, mem, t, count, count < 2000);
    }
  }
  EXPECT_EQ(comm->counters().detected, 0u);
}

TEST(DeviceCollectives, FaultsDetectedAndRepaired) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  for (FaultMode mode :
       {FaultMode::kBitFlip, FaultMode::kGarbage, FaultMode::kTrailer, FaultMode::kRetransmit}) {
    SCOPED_TRACE(faultModeName(mode));
    Options o;
    o.sliceBytes = 8192;
    o.maxRetries = 5;
    o.fault.mode = mode;
    o.fault.probability = 0.1;
    o.fault.seed = 5;
    auto comm = makeDeviceComm(o);
    DeviceMemory mem;
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16}) everyCollective(*comm, mem, t, 30001, false);
    const Counters c = comm->counters();
    EXPECT_EQ(sumOverRanks(c.escaped), 0u);
    EXPECT_EQ(sumOverRanks(c.detected), sumOverRanks(c.injected));
    if (testing::worldSize() > 1) {
      EXPECT_GT(sumOverRanks(c.injected), 0u);
    }
  }
}

// RINGGUARD_NAN_CHECK on device memory: the scan kernel runs on the communication stream after the
// caller's stream produced the input (the NaN is written by a kernel-ordered copy on the caller's stream
// just before the collective, with no host synchronisation in between).
TEST(DeviceCollectives, NanCheckOnDeviceInputs) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  const int n = testing::worldSize(), me = testing::worldRank(), bad = n - 1;
  const size_t count = 100003, at = 77777;
  DeviceMemory mem;
  cudaStream_t stream = static_cast<cudaStream_t>(mem.stream());
  std::vector<float> host(count, float(me + 1));
  std::vector<uint8_t> init(count * 4);
  std::memcpy(init.data(), host.data(), init.size());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (NanCheck mode : {NanCheck::kWarn, NanCheck::kSkip, NanCheck::kError}) {
    SCOPED_TRACE(nanCheckName(mode));
    Options o;
    o.sliceBytes = 65536;
    o.nanCheck = mode;
    auto comm = makeDeviceComm(o);
    auto* in = static_cast<float*>(mem.make(count * 4, init));
    auto* out = static_cast<float*>(mem.make(count * 4, {}));
    if (me == bad) {
      ASSERT_EQ(cudaMemcpyAsync(in + at, &nan, 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
    }
    Status st = comm->allreduce(in, out, count, DataType::kFloat32, ReduceOp::kSum, stream);
    std::vector<uint8_t> got = mem.read(out, count * 4);
    std::vector<float> res(count);
    std::memcpy(res.data(), got.data(), got.size());
    const Counters c = comm->counters();
    EXPECT_EQ(c.nonFiniteInputs, me == bad ? 1u : 0u);
    if (mode == NanCheck::kWarn) {
      ASSERT_TRUE(st.isOk()) << st.toString();
      EXPECT_TRUE(std::isnan(res[at]));
      EXPECT_EQ(res[at + 1], float(n * (n + 1) / 2));
    } else if (mode == NanCheck::kSkip) {
      ASSERT_TRUE(st.isOk()) << st.toString();
      EXPECT_EQ(c.skipped, 1u);
      // The output was never written: it still holds make()'s 0xAB fill.
      uint32_t bits;
      std::memcpy(&bits, &res[at + 1], 4);
      EXPECT_EQ(bits, 0xABABABABu);
    } else {
      EXPECT_EQ(st.code(), me == bad ? StatusCode::kInvalidArgument : StatusCode::kPeerError)
          << st.toString();
      EXPECT_NE(st.message().find("on rank " + std::to_string(bad) +
                                  " holds 1 non-finite value (NaN or +-Inf; "
                                  "first at element 77777)"),
                std::string::npos)
          << st.toString();
    }
    mem.releaseAll();
  }
}

// float8 on the device: an all-gather (float8 is copy-only) whose input holds e4m3fn's NaN (0x7f) on one rank
// fails on every rank naming it; 0x7e (448) beside it is finite.
TEST(DeviceCollectives, NanCheckOnDeviceFloat8Inputs) {
  if (!testing::everyRankHasDevice(nullptr)) GTEST_SKIP() << "no CUDA device";
  const int n = testing::worldSize(), me = testing::worldRank(), bad = n - 1;
  const size_t count = 100003, at = 77777;
  DeviceMemory mem;
  Options o;
  o.sliceBytes = 65536;
  o.nanCheck = NanCheck::kError;
  auto comm = makeDeviceComm(o);
  std::vector<uint8_t> init(count, 0x7e);
  if (me == bad) init[at] = 0x7f;
  auto* in = mem.make(count, init);
  auto* out = mem.make(count * size_t(n), {});
  Status st = comm->allgather(in, out, count, DataType::kFloat8E4M3, mem.stream());
  EXPECT_EQ(st.code(), me == bad ? StatusCode::kInvalidArgument : StatusCode::kPeerError) << st.toString();
  EXPECT_NE(st.message().find("on rank " + std::to_string(bad) +
                              " holds 1 non-finite value (NaN or +-Inf; first at element 77777)"),
            std::string::npos)
      << st.toString();
  mem.releaseAll();
}

}  // namespace
}  // namespace ringguard
