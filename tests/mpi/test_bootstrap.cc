// The MPI bootstrap: its exchanges (sizes that differ by rank, a root other than 0), node-local ranks under
// one mpirun on one host, a host communicator built from it by the runtime's factory, and both over a
// sub-communicator named by its Fortran handle (MPI_Comm_c2f: the public API has no MPI type).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/runtime/factories.h"
#include "test_util.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::makeInput;
using testing::worldRank;
using testing::worldSize;

std::unique_ptr<Bootstrap> worldBootstrap() {
  std::unique_ptr<Bootstrap> b;
  Status st = mpi::createBootstrap(&b);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return b;
}

TEST(MpiBootstrap, BroadcastTakesTheRootsBytesWhateverTheOthersHeld) {
  auto b = worldBootstrap();
  ASSERT_EQ(b->rank(), worldRank());
  ASSERT_EQ(b->size(), worldSize());
  const int root = worldSize() - 1;
  std::vector<uint8_t> bytes(size_t(worldRank()), 7);  // every rank a different size
  if (worldRank() == root) bytes = {1, 2, 3, 4, 5};
  ASSERT_TRUE(b->broadcast(root, &bytes).isOk());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  std::vector<uint8_t> none;
  ASSERT_TRUE(b->broadcast(0, &none).isOk());
  EXPECT_TRUE(none.empty());
}

TEST(MpiBootstrap, AllgatherKeepsEachRanksLengthInRankOrder) {
  auto b = worldBootstrap();
  std::vector<std::vector<uint8_t>> all;
  ASSERT_TRUE(b->allgather(std::vector<uint8_t>(size_t(worldRank()), uint8_t(worldRank())), &all).isOk());
  ASSERT_EQ(int(all.size()), worldSize());
  for (int r = 0; r < worldSize(); ++r)
    EXPECT_EQ(all[size_t(r)], std::vector<uint8_t>(size_t(r), uint8_t(r)));
}

TEST(MpiBootstrap, OneHostMakesNodeLocalRanksTheWorldRanks) {
  auto b = worldBootstrap();
  int local = -1, localSize = -1;
  ASSERT_TRUE(nodeLocalRank(*b, &local, &localSize).isOk());
  EXPECT_EQ(local, worldRank());
  EXPECT_EQ(localSize, worldSize());
}

TEST(MpiBootstrap, HostFactoryBuildsAWorkingCommunicator) {
  auto b = worldBootstrap();
  std::unique_ptr<Communicator> comm;
  ASSERT_TRUE(createHostCommunicator(*b, Options(), &comm).isOk());
  b.reset();  // the communicator does not need its bootstrap any more
  // RINGGUARD_CPU_TRANSPORT=auto (the default; the ctest entry with =mpi checks MPI alone): the ranks of
  // one host share memory.
  const char* setting = std::getenv("RINGGUARD_CPU_TRANSPORT");
  EXPECT_STREQ(comm->transportName(), setting != nullptr && std::string(setting) == "mpi" ? "mpi" : "shm");
  EXPECT_EQ(comm->memory(), MemoryKind::kHost);
  const size_t count = 1001;
  std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, worldRank(), count), out(in.size());
  ASSERT_TRUE(comm->allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
  EXPECT_EQ(out, expectedResult(DataType::kFloat32, ReduceOp::kSum, worldSize(), count));
}

// One rank's options are invalid: every rank fails when the communicator is made, that rank with its own
// reason and the others naming it (before: the others waited for it in the transport's setup, inside MPI,
// which has no timeout). Every rank took the same collective steps, so the next communicator works.
TEST(MpiBootstrap, ARankWithInvalidOptionsFailsEveryRank) {
  Options bad;
  bad.slots = -1;
  const std::string reason = bad.validate().message();
  ASSERT_NE(reason.find("RINGGUARD_SLOTS"), std::string::npos) << reason;
  std::unique_ptr<Communicator> comm;
  Status st = mpi::createCommunicator(worldRank() == 1 ? bad : Options(), &comm);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_EQ(st.message(), worldRank() == 1 ? reason : "rank 1: " + reason);
  EXPECT_EQ(comm, nullptr);

  ASSERT_TRUE(mpi::createCommunicator(Options(), &comm).isOk());
  const size_t count = 33;
  std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, worldRank(), count), out(in.size());
  ASSERT_TRUE(comm->allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum).isOk());
  EXPECT_EQ(out, expectedResult(DataType::kInt32, ReduceOp::kSum, worldSize(), count));
}

TEST(MpiSubCommunicator, BootstrapOverAHandleExchangesWithinItsHalfOnly) {
  MPI_Comm half = testing::splitByParity();
  std::unique_ptr<Bootstrap> b;
  Status st = mpi::createBootstrap(int64_t(MPI_Comm_c2f(half)), &b);
  MPI_Comm_free(&half);  // the bootstrap works on a duplicate
  ASSERT_TRUE(st.isOk()) << st.toString();
  std::vector<std::vector<uint8_t>> all;
  ASSERT_TRUE(b->allgather({uint8_t(worldRank())}, &all).isOk());
  std::vector<std::vector<uint8_t>> expected;
  for (int r = worldRank() % 2; r < worldSize(); r += 2) expected.push_back({uint8_t(r)});
  EXPECT_EQ(all, expected);
  EXPECT_EQ(b->rank(), worldRank() / 2);
}

TEST(MpiSubCommunicator, EachHalfOfASplitReducesOverItsOwnRanks) {
  MPI_Comm half = testing::splitByParity();
  std::unique_ptr<Communicator> comm;
  Status st = mpi::createCommunicator(int64_t(MPI_Comm_c2f(half)), Options(), &comm);
  MPI_Comm_free(&half);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(comm->size(), testing::halfMembers());
  ASSERT_EQ(comm->rank(), worldRank() / 2);
  for (size_t count : {size_t(1), size_t(1001)}) {
    std::vector<float> v = testing::halfInput(count);
    ASSERT_TRUE(comm->allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], testing::halfSum(i)) << "index " << i;
  }
}

// The ranks MPI_Comm_split leaves out (color MPI_UNDEFINED) hold MPI_COMM_NULL: passing its handle is an
// error at once, with no collective to hang in; so is a value that no Fortran handle can be.
TEST(MpiSubCommunicator, AHandleNamingNoCommunicatorIsRefused) {
  MPI_Comm rank0 = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, worldRank() == 0 ? 0 : MPI_UNDEFINED, 0, &rank0), MPI_SUCCESS);
  if (worldRank() == 0) {
    ASSERT_NE(rank0, MPI_COMM_NULL);
    MPI_Comm_free(&rank0);
  } else {
    ASSERT_EQ(rank0, MPI_COMM_NULL);
    std::unique_ptr<Communicator> comm;
    Status st = mpi::createCommunicator(int64_t(MPI_Comm_c2f(rank0)), Options(), &comm);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find("MPI_COMM_NULL"), std::string::npos) << st.message();
    EXPECT_EQ(comm, nullptr);
  }
  std::unique_ptr<Bootstrap> b;
  Status st = mpi::createBootstrap(int64_t(1) << 40, &b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("does not fit an MPI_Fint"), std::string::npos) << st.message();
#ifdef OPEN_MPI
  // Open MPI's MPI_Comm_f2c answers an index it never issued with a null pointer, not an error.
  st = mpi::createBootstrap(int64_t(1) << 30, &b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
#endif
  EXPECT_EQ(b, nullptr);
}

// RINGGUARD_CPU_TRANSPORT for a group over MPI (docs/ENV.md), set on every rank alike unless a test says
// otherwise, and restored after.
class CpuTransportSetting {
 public:
  explicit CpuTransportSetting(const char* value, const char* name = "RINGGUARD_CPU_TRANSPORT")
      : name_(name) {
    if (const char* v = std::getenv(name_)) saved_ = v;
    setenv(name_, value, 1);
  }
  ~CpuTransportSetting() {
    if (saved_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, saved_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string saved_;
};

// auto and shm put shared memory under the ranks of one host (every rank of an mpirun test is on this
// one), mpi keeps MPI alone; each gives exact results.
TEST(MpiSharedMemory, EachSettingGivesItsTransport) {
  for (const std::string value : {"auto", "shm", "mpi"}) {
    CpuTransportSetting setting(value.c_str());
    std::unique_ptr<Communicator> comm;
    Status st = mpi::createCommunicator(Options(), &comm);
    ASSERT_TRUE(st.isOk()) << value << ": " << st.toString();
    EXPECT_STREQ(comm->transportName(), value == "mpi" ? "mpi" : "shm") << value;
    const size_t count = 1000001;  // blocks of several slices
    std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, worldRank(), count),
                         out(in.size());
    ASSERT_TRUE(comm->allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
    EXPECT_EQ(out, expectedResult(DataType::kFloat32, ReduceOp::kSum, worldSize(), count)) << value;
  }
}

// gloo is the torch backend's helper: a communicator over MPI refuses it on every rank. A bootstrap used for
// exchanges alone (the torch package's port broadcast) reads no transport setting and works.
TEST(MpiSharedMemory, GlooIsRefusedWhenATransportIsMade) {
  CpuTransportSetting setting("gloo");
  std::unique_ptr<Bootstrap> b;
  Status st = mpi::createBootstrap(&b);
  ASSERT_TRUE(st.isOk()) << st.toString();
  std::vector<uint8_t> bytes = {uint8_t(worldRank())};
  ASSERT_TRUE(b->broadcast(0, &bytes).isOk());
  EXPECT_EQ(bytes, std::vector<uint8_t>{0});
  std::unique_ptr<Communicator> comm;
  st = mpi::createCommunicator(Options(), &comm);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("RINGGUARD_CPU_TRANSPORT=gloo"), std::string::npos) << st.message();
  EXPECT_EQ(comm, nullptr);
}

// One rank's value is unusable (gloo, or no choice at all): it takes part in the setup's first exchange, so
// every rank fails at once naming it, instead of the others waiting for it in MPI without a timeout.
TEST(MpiSharedMemory, ARankWithAnUnusableValueFailsEveryRank) {
  for (const char* bad : {"gloo", "bogus"}) {
    CpuTransportSetting setting(worldRank() == 1 ? bad : "auto");
    std::unique_ptr<Communicator> comm;
    Status st = mpi::createCommunicator(Options(), &comm);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad << ": " << st.toString();
    EXPECT_NE(
        st.message().find(worldRank() == 1 ? "RINGGUARD_CPU_TRANSPORT" : "rank 1: RINGGUARD_CPU_TRANSPORT"),
        std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find(bad), std::string::npos) << st.message();
    EXPECT_EQ(comm, nullptr);
  }
}

// Rank 0 asks for MPI alone, the others for auto: every rank fails when the communicator is made, naming
// both values, instead of one side waiting in shared memory for frames the other sends over MPI.
TEST(MpiSharedMemory, RanksThatDisagreeAllFailNamingBoth) {
  CpuTransportSetting setting(worldRank() == 0 ? "mpi" : "auto");
  std::unique_ptr<Communicator> comm;
  Status st = mpi::createCommunicator(Options(), &comm);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("RINGGUARD_CPU_TRANSPORT differs between ranks"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(worldRank() == 0 ? "rank 1 has auto" : "rank 0 has mpi"), std::string::npos)
      << st.message();
  EXPECT_EQ(comm, nullptr);
}

// Single-copy reads between the processes of this mpirun (docs/design/protocol.md, "Single-copy read"): an
// all-gather of 160 KB blocks and a ring of 64 KiB send/recv messages, read with process_vm_readv straight
// from the publisher's buffer, with damaged reads re-read (detected == injected); and the same where rank 1
// turns them off (RINGGUARD_SHM_SINGLE_COPY_BYTES=0), which makes every rank copy through the windows.
// Exact results either way.
TEST(MpiSharedMemory, SingleCopyReadsAndTheirFallback) {
  const int n = worldSize(), me = worldRank();
  for (const char* off : {"65536", "0"}) {
    CpuTransportSetting setting(me == 1 ? off : "65536", "RINGGUARD_SHM_SINGLE_COPY_BYTES");
    Options o;
    o.fault.mode = FaultMode::kBitFlip;
    o.fault.probability = 0.2;
    o.fault.seed = 11;
    o.maxRetries = 5;
    std::unique_ptr<Communicator> comm;
    ASSERT_TRUE(mpi::createCommunicator(o, &comm).isOk());
    const size_t block = 40000, message = 16384;
    for (int round = 0; round < 4; ++round) {
      std::vector<float> mine(block), all(block * size_t(n));
      for (size_t i = 0; i < block; ++i) mine[i] = float(me * 100000 + round + int(i % 1000));
      ASSERT_TRUE(comm->allgather(mine.data(), all.data(), block, DataType::kFloat32).isOk()) << off;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < block; i += 997) {
          ASSERT_EQ(all[size_t(r) * block + i], float(r * 100000 + round + int(i % 1000))) << off << " " << r;
        }
      }
      std::vector<float> out(message, -1.0f), in(message);
      for (size_t i = 0; i < message; ++i) in[i] = float(me * 7 + round + int(i));
      const int right = (me + 1) % n, left = (me + n - 1) % n;
      ASSERT_TRUE(
          comm->sendRecv(in.data(), message, right, out.data(), message, left, DataType::kFloat32).isOk())
          << off;
      for (size_t i = 0; i < message; ++i) ASSERT_EQ(out[i], float(left * 7 + round + int(i))) << off;
    }
    const Counters c = comm->counters();
    EXPECT_EQ(c.detected, c.injected) << off;
    EXPECT_GT(c.injected, 0u) << off;
    EXPECT_EQ(c.escaped, 0u) << off;
  }
}

}  // namespace
}  // namespace ringguard
