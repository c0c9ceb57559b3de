// The choice of a group's host bootstrap (ringguard/bootstrap/host_bootstrap.h) and the check of a torch
// group against MPI_COMM_WORLD (bootstrap/mpi_group_check.h): what the c10d backend decides before it makes
// its CPU communicator, tested without MPI or torch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/mpi_group_check.h"
#include "loopback_util.h"
#include "memory_bootstrap.h"
#include "ringguard/bootstrap/host_bootstrap.h"
#include "transport/transport.h"

namespace ringguard {
namespace {

using testing::Board;
using testing::MemoryBootstrap;

SettingLookup cpuTransport(const char* value) {
  return [value](const char* name) -> const char* {
    return std::string(name) == "RINGGUARD_CPU_TRANSPORT" ? value : nullptr;
  };
}

const char* kindName(HostBootstrapKind k) { return k == HostBootstrapKind::kMpi ? "mpi" : "store"; }

// Every value of RINGGUARD_CPU_TRANSPORT (unset: auto), under mpirun or not, with MPI in the build or not.
TEST(HostBootstrap, ChoiceFollowsTheSettingTheLauncherAndTheBuild) {
  struct Row {
    const char* value;
    bool underMpirun;
    bool haveMpi;
    const char* expected;  // "error": kInvalidArgument
  };
  const Row rows[] = {
      {nullptr, true, true, "mpi"},    {nullptr, false, true, "store"},   {nullptr, true, false, "store"},
      {"auto", true, true, "mpi"},     {"auto", false, true, "store"},    {"auto", true, false, "store"},
      {"mpi", false, true, "mpi"},     {"mpi", true, true, "mpi"},        {"mpi", true, false, "error"},
      {"mpi", false, false, "error"},  {"shm", true, true, "store"},      {"gloo", true, true, "store"},
      {"gloo", false, false, "store"}, {"nonsense", true, true, "store"}, {"nonsense", true, false, "store"},
  };
  for (const Row& r : rows) {
    HostBootstrapKind kind = HostBootstrapKind::kMpi;
    const Status st = chooseHostBootstrap(cpuTransport(r.value), r.underMpirun, r.haveMpi, &kind);
    const std::string got = st.isOk() ? kindName(kind) : "error";
    EXPECT_EQ(got, r.expected) << (r.value ? r.value : "(unset)") << " mpirun=" << r.underMpirun
                               << " mpi=" << r.haveMpi << ": " << st.toString();
    if (!st.isOk()) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(st.message(), "RINGGUARD_CPU_TRANSPORT=mpi, but this build has no MPI");
    }
  }
}

TEST(HostBootstrap, StartedByMpirunReadsTheLaunchersEnvironment) {
  const char* saved[2] = {std::getenv("OMPI_COMM_WORLD_SIZE"), std::getenv("PMI_SIZE")};
  const std::string keep[2] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : ""};
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  EXPECT_FALSE(startedByMpirun());
  setenv("PMI_SIZE", "2", 1);
  EXPECT_TRUE(startedByMpirun());
  unsetenv("PMI_SIZE");
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_TRUE(startedByMpirun());
  unsetenv("OMPI_COMM_WORLD_SIZE");
  if (saved[0]) setenv("OMPI_COMM_WORLD_SIZE", keep[0].c_str(), 1);
  if (saved[1]) setenv("PMI_SIZE", keep[1].c_str(), 1);
}

// Ranks that set the same value (unset and auto are one value) agree; a difference fails every rank naming
// its own value and the first other one it sees.
TEST(HostBootstrap, RanksAgreeOnCpuTransportOrAllFailNamingBoth) {
  {
    const char* values[3] = {nullptr, "auto", nullptr};
    Board board(3);
    testing::runRanks(3, [&](int rank) {
      MemoryBootstrap b(&board, rank);
      const Status st = agreeOnCpuTransport(b, cpuTransport(values[rank]));
      EXPECT_TRUE(st.isOk()) << st.toString();
    });
  }
  {
    const char* values[3] = {"mpi", "mpi", "gloo"};
    std::map<int, std::string> messages;
    std::mutex mutex;
    Board board(3);
    testing::runRanks(3, [&](int rank) {
      MemoryBootstrap b(&board, rank);
      const Status st = agreeOnCpuTransport(b, cpuTransport(values[rank]));
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      std::lock_guard<std::mutex> lock(mutex);
      messages[rank] = st.message();
    });
    const std::string tail = " (every rank must set the same)";
    EXPECT_EQ(messages[0],
              "RINGGUARD_CPU_TRANSPORT differs between ranks: rank 0 has mpi, rank 2 has gloo" + tail);
    EXPECT_EQ(messages[1],
              "RINGGUARD_CPU_TRANSPORT differs between ranks: rank 1 has mpi, rank 2 has gloo" + tail);
    EXPECT_EQ(messages[2],
              "RINGGUARD_CPU_TRANSPORT differs between ranks: rank 2 has gloo, rank 0 has mpi" + tail);
  }
  {
    // A value that does not parse is compared as its text.
    const char* values[2] = {"nonsense", "shm"};
    Board board(2);
    testing::runRanks(2, [&](int rank) {
      MemoryBootstrap b(&board, rank);
      const Status st = agreeOnCpuTransport(b, cpuTransport(values[rank]));
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find(rank == 0 ? "rank 0 has nonsense, rank 1 has shm"
                                            : "rank 1 has shm, rank 0 has nonsense"),
                std::string::npos)
          << st.message();
    });
  }
}

// The wrapper's host transport: inner's, through shared memory unless the setting is the caller's "off"
// value; a value that does not parse fails every rank with its error.
TEST(HostBootstrap, WithSharedMemoryConnectsInnersTransportAsTheSettingSays) {
  struct Case {
    std::vector<const char*> values;
    const char* transport;  // every rank's, or nullptr: every rank fails with `error`
    const char* error;
  };
  const Case cases[] = {
      {{"shm", "shm"}, "shm", nullptr},
      {{nullptr, nullptr, nullptr}, "shm", nullptr},  // unset: auto, and the ranks share this host
      {{"gloo", "gloo"}, "loopback", nullptr},
      {{"nonsense", "shm"}, nullptr, "RINGGUARD_CPU_TRANSPORT='nonsense'"},
  };
  for (const Case& c : cases) {
    const int n = int(c.values.size());
    Board board(n);
    std::vector<Status> status(static_cast<size_t>(n));
    std::vector<std::string> names(static_cast<size_t>(n));
    testing::runRanks(n, [&](int rank) {
      MemoryBootstrap inner(&board, rank);
      std::unique_ptr<Bootstrap> b = withSharedMemory(inner, cpuTransport(c.values[size_t(rank)]), "gloo",
                                                      std::chrono::milliseconds(20000));
      EXPECT_EQ(b->rank(), rank);
      EXPECT_EQ(b->size(), n);
      std::unique_ptr<Transport> t;
      status[size_t(rank)] = b->createHostTransport(&t);
      names[size_t(rank)] = t ? t->name() : "";
    });
    for (int r = 0; r < n; ++r) {
      if (c.transport != nullptr) {
        EXPECT_TRUE(status[size_t(r)].isOk()) << status[size_t(r)].toString();
        EXPECT_EQ(names[size_t(r)], c.transport) << "rank " << r;
      } else {
        EXPECT_EQ(status[size_t(r)].code(), StatusCode::kInvalidArgument) << "rank " << r;
        EXPECT_NE(status[size_t(r)].message().find(c.error), std::string::npos)
            << status[size_t(r)].message();
      }
    }
  }
}

TEST(MpiGroupCheck, AGroupOfTheWorldsRanksPasses) {
  EXPECT_TRUE(mpi::checkGroupInWorld({}, 1, 4, 1, 4).isOk());      // the world, in order
  EXPECT_TRUE(mpi::checkGroupInWorld({3, 1}, 0, 2, 3, 4).isOk());  // a sub-group, in the group's order
  EXPECT_TRUE(mpi::checkGroupInWorld({3, 1}, 1, 2, 1, 4).isOk());
}

TEST(MpiGroupCheck, ARankOutsideTheWorldNamesTheLauncher) {
  // torchrun started each rank as an MPI job of its own: a world of one.
  const Status st = mpi::checkGroupInWorld({}, 1, 2, 0, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      st.message(),
      "the group has torch rank 1 but MPI_COMM_WORLD has 1 process: RINGGUARD_CPU_TRANSPORT=mpi needs the "
      "job started by mpirun (a launcher such as torchrun starts each rank as an MPI job of its own); set "
      "RINGGUARD_CPU_TRANSPORT=gloo or auto");
  EXPECT_NE(mpi::checkGroupInWorld({0, 5}, 0, 2, 0, 4)
                .message()
                .find("torch rank 5 but MPI_COMM_WORLD has 4 processes"),
            std::string::npos);
}

TEST(MpiGroupCheck, TorchRanksThatAreNotMpisAreRefused) {
  const Status st = mpi::checkGroupInWorld({2, 0}, 0, 2, 0, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "group rank 0 is torch rank 2 but MPI rank 0: under mpirun torch's ranks must be MPI's (call "
            "ringguard.init_from_mpi() before init_process_group), or set RINGGUARD_CPU_TRANSPORT=gloo");
  // A list that is not the group's size names no torch rank.
  EXPECT_NE(mpi::checkGroupInWorld({0, 1, 2}, 0, 2, 0, 4).message().find("group rank 0 is torch rank -1"),
            std::string::npos);
}

}  // namespace
}  // namespace ringguard
