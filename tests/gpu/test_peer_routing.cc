// What RINGGUARD_DEVICE_TRANSPORT=auto and =peer give the peer windows, under mpirun with every rank on the
// one GPU (docs/GPU.md, "The one-sided path"): a NaN check keeps every collective on the host-driven path
// under auto (its scan is a host step the kernels do not have), refuses peer asked by name, and must be the
// same on every rank; a fault schedule (applied by the host-driven path only) does the same, from any one
// rank; auto leaves the split all-to-all (blocks of any size) and send/recv to the pipeline; a call above the
// window runs on the pipeline beside its marker on the windows, and ranks whose calls fall either side of
// the window's size all fail at once naming both.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "peer_test_util.h"

namespace ringguard {
namespace {

Status makeDevice(const Options& o, cuda::DeviceTransportKind kind, std::unique_ptr<Bootstrap>* bootstrap,
                  std::unique_ptr<Communicator>* c) {
  EXPECT_TRUE(mpi::createBootstrap(MPI_COMM_WORLD, bootstrap).isOk());
  cuda::DeviceOptions d;
  d.transport = kind;
  d.peerBytes = 1u << 20;
  return cuda::createDeviceCommunicator(**bootstrap, o, d, c);
}

// A communicator under auto with the 1 MiB window (makeDevice), on the windows: the test stops if not.
void makeAutoOnTheWindows(const Options& o, std::unique_ptr<Bootstrap>* b, std::unique_ptr<Communicator>* c) {
  const Status made = makeDevice(o, cuda::DeviceTransportKind::kAuto, b, c);
  ASSERT_TRUE(made.isOk()) << made.toString();
  ASSERT_STREQ((*c)->transportName(), "peer");
}

// A communicator refused when it is made: kInvalidArgument, with `text` in its message.
void expectRefused(const Status& st, const std::string& text) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find(text), std::string::npos) << st.toString();
}

// This process's rank and the number of ranks in MPI_COMM_WORLD.
std::pair<int, int> worldRankAndSize() {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return {rank, size};
}

TEST(PeerRouting, NanCheckRefusesThePeerPathAskedByName) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  Options o;
  o.nanCheck = NanCheck::kError;
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  const Status st = makeDevice(o, cuda::DeviceTransportKind::kPeer, &b, &c);
  expectRefused(st, "RINGGUARD_DEVICE_TRANSPORT=peer runs no NaN/Inf scan (RINGGUARD_NAN_CHECK=error)");
}

// Under auto the check runs: the rank whose input holds the NaN fails naming it, the others with a peer error
// naming it too, and the communicator has no peer path. A communicator per collective (an error fails it).
TEST(PeerRouting, NanCheckUnderAutoScansEveryCollective) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  Options o;
  o.nanCheck = NanCheck::kError;
  const std::pair<int, int> world = worldRankAndSize();
  const int rank = world.first, size = world.second;
  const int bad = size - 1;
  const size_t count = 1000, at = 7;
  std::vector<float> host(count, float(rank + 1));
  if (rank == bad) host[at] = std::numeric_limits<float>::quiet_NaN();
  peer::DeviceBuffer in(count * 4), out(count * 4 * size_t(size));
  ASSERT_EQ(peer::upload(in.get(), host.data(), count * 4), cudaSuccess);
  for (const char* what : {"allreduce", "allgather"}) {
    SCOPED_TRACE(what);
    std::unique_ptr<Bootstrap> b;
    std::unique_ptr<Communicator> c;
    const Status made = makeDevice(o, cuda::DeviceTransportKind::kAuto, &b, &c);
    ASSERT_TRUE(made.isOk()) << made.toString();
    EXPECT_STRNE(c->transportName(), "peer");
    const Status st =
        std::string(what) == "allreduce"
            ? c->allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, nullptr)
            : c->allgather(in.get(), out.get(), count, DataType::kFloat32, nullptr);
    EXPECT_EQ(st.code(), rank == bad ? StatusCode::kInvalidArgument : StatusCode::kPeerError)
        << st.toString();
    EXPECT_NE(st.message().find("on rank " + std::to_string(bad) +
                                " holds 1 non-finite value (NaN or +-Inf; first at element 7)"),
              std::string::npos)
        << st.toString();
  }
}

TEST(PeerRouting, RanksThatDifferOnTheNanCheckAllFailNamingBoth) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  const int rank = worldRankAndSize().first;
  Options o;
  o.nanCheck = rank == 0 ? NanCheck::kOff : NanCheck::kWarn;
  const Status st = makeDevice(o, cuda::DeviceTransportKind::kAuto, &b, &c);
  expectRefused(st, "RINGGUARD_NAN_CHECK differs between ranks: rank 0 has off, rank 1 has warn");
}

// A fault schedule names the pipeline's steps and slices, which the kernels do not have: peer asked by name
// refuses it naming the rank; under auto a schedule on one rank only keeps every rank off the windows (the
// ranks would route differently otherwise), and the scheduled injection is made, caught and re-sent.
TEST(PeerRouting, FaultScheduleRefusesThePeerPathAskedByName) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  const std::pair<int, int> world = worldRankAndSize();
  const int rank = world.first, size = world.second;
  Options o;
  if (rank == size - 1) o.fault.schedule = {{0, 0, 0, 0}};
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  const Status st = makeDevice(o, cuda::DeviceTransportKind::kPeer, &b, &c);
  expectRefused(st, "RINGGUARD_DEVICE_TRANSPORT=peer applies no fault schedule (rank " +
                        std::to_string(size - 1) + " has RINGGUARD_FAULT_SCHEDULE");
}

TEST(PeerRouting, FaultScheduleOnOneRankKeepsAutoOnThePipeline) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  const std::pair<int, int> world = worldRankAndSize();
  const int rank = world.first, size = world.second;
  Options o;
  o.sliceBytes = 256;
  // Collective 0, step 0, slice 0, into rank 1: set on rank 1 only (the rank whose receive it damages).
  if (rank == 1) o.fault.schedule = {{0, 0, 0, 1}};
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  const Status made = makeDevice(o, cuda::DeviceTransportKind::kAuto, &b, &c);
  ASSERT_TRUE(made.isOk()) << made.toString();  // every rank or none: the ranks agree when it is made
  EXPECT_STRNE(c->transportName(), "peer");
  const size_t count = 4096;
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = float(int(i % 1000) * (rank + 1));  // exact sums
  peer::DeviceBuffer in(count * 4), out(count * 4);
  // No ASSERT between here and the MPI_Allreduce below: a rank that returned early would leave the others
  // waiting in it.
  Status st = peer::upload(in.get(), host.data(), count * 4) == cudaSuccess
                  ? Status::ok()
                  : Status(StatusCode::kInternal, "upload failed");
  if (st.isOk()) st = c->allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, nullptr);
  EXPECT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (st.isOk()) {
    std::vector<uint8_t> got = peer::toHost(out.get(), count * 4);
    const float ranks = float(size * (size + 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      float v = 0;
      std::memcpy(&v, got.data() + i * 4, 4);
      if (v != float(int(i % 1000)) * ranks) {
        ADD_FAILURE() << "element " << i << ": " << v << ", expected " << float(int(i % 1000)) * ranks;
        break;
      }
    }
  }
  const uint64_t mine[2] = {c->counters().injected, c->counters().detected};
  uint64_t total[2] = {0, 0};
  MPI_Allreduce(mine, total, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GE(total[0], 1u);
  EXPECT_EQ(total[1], total[0]);
}

// A split all-to-all whose blocks exceed the window (1 MiB here) fails every rank on the windows
// (kBlockTable, test_peer_collectives.cc); under auto it takes the pipeline and is exact. Send/recv stays
// there too.
TEST(PeerRouting, AutoLeavesTheSplitAlltoallAndSendRecvToThePipeline) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  ASSERT_NO_FATAL_FAILURE(makeAutoOnTheWindows(Options{}, &b, &c));
  EXPECT_FALSE(c->sendRecvOnPeerWindows());
  const int rank = c->rank(), size = c->size();
  const size_t block = 300000;  // 1.2 MB of floats per block: above the window
  std::vector<size_t> counts(size_t(size), block), displs(size_t(size), 0);
  for (int q = 0; q < size; ++q) displs[size_t(q)] = size_t(q) * block;
  // Element i of the block from p to q: integers that name p, q and i (exact in float).
  auto value = [](int p, int q, size_t i) { return float(p * 1000000 + q * 100000 + int(i % 99991)); };
  std::vector<float> send(block * size_t(size)), want(block * size_t(size));
  for (int q = 0; q < size; ++q) {
    for (size_t i = 0; i < block; ++i) {
      send[size_t(q) * block + i] = value(rank, q, i);
      want[size_t(q) * block + i] = value(q, rank, i);
    }
  }
  peer::DeviceBuffer in(send.size() * 4), out(want.size() * 4);
  ASSERT_EQ(peer::upload(in.get(), send.data(), send.size() * 4), cudaSuccess);
  const Status st =
      c->alltoallAsync(in.get(), counts, displs, out.get(), counts, displs, DataType::kFloat32, nullptr)
          ->wait();
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got = peer::toHost(out.get(), want.size() * 4);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
}

// Above the 1 MiB window every collective the windows carry runs on the pipeline, exact, each beside its
// marker in the windows' order (DirectPath::offPath); every rank's markers agree, and a call that fits the
// window afterwards runs there, exact.
TEST(PeerRouting, CallsAboveTheWindowRunOnThePipelineBesideTheirMarkers) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  ASSERT_NO_FATAL_FAILURE(makeAutoOnTheWindows(Options{}, &b, &c));
  const int rank = c->rank(), size = c->size();
  // Element i of rank r's input: an integer (sums exact in float, whatever the order).
  auto value = [](int r, size_t i) { return float(r * 1000 + int(i % 997)); };
  for (const size_t count : {size_t(1) << 19, size_t(1000)}) {  // 2 MiB a rank: above the window; then in it
    std::vector<float> x(count * size_t(size));
    for (size_t i = 0; i < x.size(); ++i) x[i] = value(rank, i);
    peer::DeviceBuffer in(x.size() * 4), out(x.size() * 4);
    ASSERT_EQ(peer::upload(in.get(), x.data(), x.size() * 4), cudaSuccess);
    auto expectOut = [&](const std::vector<float>& want, const char* what) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint8_t> got = peer::toHost(out.get(), want.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << what << " count " << count;
    };
    std::vector<float> sum(count, 0.f), scattered(count, 0.f), gathered;
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < count; ++i) {
        sum[i] += value(r, i);
        scattered[i] += value(r, size_t(rank) * count + i);
      }
      for (size_t i = 0; i < count; ++i) gathered.push_back(value(r, i));
    }
    Status st =
        c->allreduceAsync(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, nullptr)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    expectOut(sum, "allreduce");
    st = c->allgatherAsync(in.get(), out.get(), count, DataType::kFloat32, nullptr)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    expectOut(gathered, "allgather");
    st = c->broadcastAsync(in.get(), out.get(), count, DataType::kFloat32, size - 1, nullptr)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<float> root(count);
    for (size_t i = 0; i < count; ++i) root[i] = value(size - 1, i);
    expectOut(root, "broadcast");
    st = c->reduceScatterAsync(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, nullptr)
             ->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    expectOut(scattered, "reduce_scatter");
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(c->firstError().isOk()) << c->firstError().toString();
  EXPECT_EQ(c->counters().collectives, 8u);
}

// Rank 0's all-reduce fits the 1 MiB window and runs there; every other rank's is above it and runs on the
// pipeline beside its marker: every rank fails at once (well inside the 30 s timeout), each error naming the
// call off the windows, instead of each waiting for the others until its deadline.
TEST(PeerRouting, CallsEitherSideOfTheWindowFailAtOnceNamingBoth) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::BarrierAtExit barrier;
  Options o;
  o.timeout = std::chrono::milliseconds(30000);
  std::unique_ptr<Bootstrap> b;
  std::unique_ptr<Communicator> c;
  ASSERT_NO_FATAL_FAILURE(makeAutoOnTheWindows(o, &b, &c));
  const size_t count = c->rank() == 0 ? 1000 : size_t(1) << 19;
  peer::DeviceBuffer in(count * 4), out(count * 4);
  ASSERT_EQ(cudaMemset(in.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  const Status waited =
      c->allreduceAsync(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, nullptr)->wait();
  // Rank 0's call returned at its launch (the kernel's error is asynchronous: its watchdog reads it).
  while (c->firstError().isOk() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Status st = c->firstError();
  ASSERT_FALSE(st.isOk()) << "rank " << c->rank() << ": no error after " << seconds
                          << " s (wait: " << waited.toString() << ")";
  EXPECT_LT(seconds, 10.0) << st.toString();
  EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << st.toString();
  EXPECT_NE(st.message().find("off-the-peer-windows"), std::string::npos) << st.toString();
  EXPECT_NE(st.message().find("RINGGUARD_PEER_BYTES"), std::string::npos) << st.toString();
  if (c->rank() != 0) {
    EXPECT_FALSE(waited.isOk()) << "the pipeline's call ends with the error too";
  }
}

}  // namespace
}  // namespace ringguard
