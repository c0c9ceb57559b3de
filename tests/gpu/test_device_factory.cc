// The device factory over a bootstrap that is not MPI: ranks on threads of one process, their exchanges and
// host transports in memory (tests/unit/memory_bootstrap.h). The device layer needs no MPI, and this is
// the proof that runs in every build with CUDA: the NoGpu* test where no device is, the rest on a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "loopback_util.h"
#include "memory_bootstrap.h"
#include "ringguard/runtime/device_factory.h"

namespace ringguard {
namespace {

using testing::Board;
using testing::MemoryBootstrap;
using testing::runRanks;

// Options are checked against the bootstrap's group before any CUDA call, so this holds on any machine:
// a fault schedule naming a rank the group lacks could never fire.
TEST(NoGpuDeviceFactory, RejectsOptionsTheGroupCannotHonourBeforeAnyCudaCall) {
  Board board(1);
  MemoryBootstrap b(&board, 0);
  Options o;
  o.fault.schedule = {{0, 0, 0, 1}};
  cuda::DeviceOptions d;
  d.device = 0;
  std::unique_ptr<Communicator> c;
  const Status st = cuda::createDeviceCommunicator(b, o, d, &c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 1 does not exist"), std::string::npos) << st.message();
  EXPECT_EQ(c, nullptr);
}

// Rank 1's options are invalid: every rank fails, none waits for another in an exchange (the in-memory
// bootstrap's have no timeout; before, rank 0 waited in the NCCL-or-staged agreement for rank 1, which had
// returned). With a GPU, rank 0 fails naming rank 1's reason; without one, each rank has a reason of its own.
TEST(NoGpuDeviceFactory, ARankWithInvalidOptionsFailsEveryRank) {
  Board board(2);
  Options bad;
  bad.slots = -1;
  const std::string reason = bad.validate().message();
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();
  std::vector<Status> made(2);
  runRanks(2, [&](int rank) {
    MemoryBootstrap b(&board, rank);
    std::unique_ptr<Communicator> c;
    made[size_t(rank)] =
        cuda::createDeviceCommunicator(b, rank == 1 ? bad : Options(), cuda::DeviceOptions(), &c);
    EXPECT_EQ(c, nullptr) << "rank " << rank;
  });
  EXPECT_EQ(made[1].code(), StatusCode::kInvalidArgument) << made[1].toString();
  EXPECT_EQ(made[1].message(), reason);
  EXPECT_EQ(made[0].code(), StatusCode::kInvalidArgument) << made[0].toString();
  if (gpu) {
    EXPECT_EQ(made[0].message(), "rank 1: " + reason);
  } else {
    EXPECT_NE(made[0].message().find("no usable GPU"), std::string::npos) << made[0].message();
  }
}

// Makes one device communicator per rank of an in-memory bootstrap, every rank on GPU 0 (creation is
// collective over the bootstrap, so the ranks make theirs at once). A rank that fails leaves null.
// `tweak` changes a rank's device options (settings that differ between ranks).
std::vector<std::unique_ptr<Communicator>> makeOnGpu0(
    int n, cuda::DeviceTransportKind kind, std::vector<Status>* made,
    const std::function<void(int, cuda::DeviceOptions*)>& tweak = nullptr) {
  Board board(n);
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(n));
  made->assign(size_t(n), Status::ok());
  runRanks(n, [&](int rank) {
    MemoryBootstrap b(&board, rank);
    cuda::DeviceOptions d;
    d.transport = kind;
    d.device = 0;
    if (tweak) tweak(rank, &d);
    Options o;
    o.sliceBytes = 4096;  // many slices per rank at the largest count below
    (*made)[size_t(rank)] = cuda::createDeviceCommunicator(b, o, d, &comms[size_t(rank)]);
  });
  return comms;
}

// Rank r contributes r + 1 + (i mod 7) at index i: the float sum over n ranks is n(n+1)/2 + n (i mod 7),
// integer-valued, so exact in any order.
void expectExactSums(std::vector<std::unique_ptr<Communicator>>& comms) {
  const int n = int(comms.size());
  for (size_t count : {size_t(1), size_t(7), size_t(100003)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    runRanks(n, [&](int rank) {
      ASSERT_CUDA(cudaSetDevice(0));
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = float(rank + 1 + int(i % 7));
      cudaStream_t stream = nullptr;
      ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      void* send = nullptr;
      void* recv = nullptr;
      ASSERT_CUDA(cudaMalloc(&send, count * sizeof(float)));
      ASSERT_CUDA(cudaMalloc(&recv, count * sizeof(float)));
      ASSERT_CUDA(cudaMemcpy(send, in.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaMemset(recv, 0xFF, count * sizeof(float)));  // NaN: a slice never written shows
      ASSERT_CUDA(cudaDeviceSynchronize());  // the legacy-stream copies before the non-blocking streams
      ASSERT_STATUS_OK(
          comms[size_t(rank)]->allreduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, stream));
      // The call ordered `stream` after the results: reading on it sees them.
      std::vector<float> out(count);
      ASSERT_CUDA(cudaMemcpyAsync(out.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
      ASSERT_CUDA(cudaStreamSynchronize(stream));
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], float(n * (n + 1) / 2 + n * int(i % 7))) << "rank " << rank << " index " << i;
      }
      cudaFree(send);
      cudaFree(recv);
      cudaStreamDestroy(stream);
    });
  }
}

// Three ranks sharing one GPU: kAuto agrees on the host-staged transport over the bootstrap (NCCL refuses
// two ranks on one device), and the staged ring reduces exactly.
TEST(DeviceFactory, RanksSharingAGpuAgreeOnStagedAndReduce) {
  SKIP_WITHOUT_GPU();
  std::vector<Status> made;
  auto comms = makeOnGpu0(3, cuda::DeviceTransportKind::kAuto, &made);
  for (const Status& st : made) ASSERT_STATUS_OK(st);
  for (auto& c : comms) EXPECT_STREQ(c->transportName(), "staged");
  for (auto& c : comms) EXPECT_EQ(c->memory(), MemoryKind::kDevice);
  expectExactSums(comms);
  for (auto& c : comms) EXPECT_EQ(c->counters().detected, 0u);
}

// Ranks that ask for different device transports all fail naming both, before any transport is made (one
// rank alone in the NCCL-or-staged exchange used to wait for the others there).
TEST(DeviceFactory, RanksAskingForDifferentTransportsAllFailNamingBoth) {
  SKIP_WITHOUT_GPU();
  std::vector<Status> made;
  auto comms = makeOnGpu0(2, cuda::DeviceTransportKind::kAuto, &made, [](int rank, cuda::DeviceOptions* d) {
    if (rank == 1) d->transport = cuda::DeviceTransportKind::kStaged;
  });
  for (auto& c : comms) EXPECT_EQ(c, nullptr);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(made[size_t(rank)].code(), StatusCode::kInvalidArgument) << made[size_t(rank)].toString();
    EXPECT_NE(made[size_t(rank)].message().find("RINGGUARD_DEVICE_TRANSPORT differs between ranks"),
              std::string::npos)
        << made[size_t(rank)].message();
    EXPECT_NE(made[size_t(rank)].message().find(rank == 0 ? "rank 1 has staged" : "rank 0 has auto"),
              std::string::npos)
        << made[size_t(rank)].message();
  }
}

// Threads of one process asking for the peer path all fail naming two of them: their spinning kernels would
// wait on each other behind one rank's device-wide synchronisation (RanksSharingAGpuAgreeOnStagedAndReduce
// deadlocked so in auto mode until auto stopped taking the path for them).
TEST(DeviceFactory, RanksInOneProcessAskingForThePeerPathAllFailNamingTwo) {
  SKIP_WITHOUT_GPU();
  std::vector<Status> made;
  auto comms = makeOnGpu0(2, cuda::DeviceTransportKind::kPeer, &made);
  for (auto& c : comms) EXPECT_EQ(c, nullptr);
  for (const Status& st : made) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find("needs one process per rank: ranks 0 and 1 are threads of one process"),
              std::string::npos)
        << st.message();
  }
}

// Ranks whose RINGGUARD_PEER_TWO_SHOT_BYTES differ would run different allreduce kernels for one call: they
// all fail when the communicator is made, naming two of them.
TEST(DeviceFactory, RanksWithDifferentTwoShotThresholdsAllFailNamingTwo) {
  SKIP_WITHOUT_GPU();
  std::vector<Status> made;
  auto comms = makeOnGpu0(2, cuda::DeviceTransportKind::kAuto, &made, [](int rank, cuda::DeviceOptions* d) {
    d->peerTwoShotBytes = rank == 0 ? 1048576 : 65536;
  });
  for (auto& c : comms) EXPECT_EQ(c, nullptr);
  for (const Status& st : made) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(
        st.message().find("RINGGUARD_PEER_TWO_SHOT_BYTES differs between ranks: rank 0 has 1048576, rank 1 "
                          "has 65536"),
        std::string::npos)
        << st.message();
  }
}

// NCCL with world size 1: rank 0's unique id travels over the in-memory bootstrap, not MPI. A build without
// NCCL refuses the request instead (no skip: a skipped test would mark the whole gpu entry skipped).
TEST(DeviceFactory, NcclIdOverANonMpiBootstrap) {
  SKIP_WITHOUT_GPU();
  std::vector<Status> made;
  auto comms = makeOnGpu0(1, cuda::DeviceTransportKind::kNccl, &made);
  if (!cuda::haveNccl()) {
    EXPECT_EQ(made[0].code(), StatusCode::kInvalidArgument) << made[0].toString();
    EXPECT_EQ(comms[0], nullptr);
    return;
  }
  ASSERT_STATUS_OK(made[0]);
  EXPECT_STREQ(comms[0]->transportName(), "nccl");
  EXPECT_EQ(comms[0]->memory(), MemoryKind::kDevice);
  expectExactSums(comms);
}

}  // namespace
}  // namespace ringguard
