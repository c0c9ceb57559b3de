// The timeline and the run summary under mpirun (issue 18): with RINGGUARD_TIMELINE and RINGGUARD_SUMMARY
// set (by ctest), a faulty run leaves one Chrome trace and one summary per rank when its communicator is
// destroyed. Each rank checks its summary against its counters; then every rank reads every rank's trace
// and checks the run as a whole (tests/unit/timeline_checks.h).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../unit/timeline_checks.h"
#include "test_util.h"

namespace ringguard {
namespace {

using nlohmann::json;

json readJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return f.good() ? json::parse(f) : json();
}

std::string prefixOf(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

TEST(MpiTimeline, FaultyRunLeavesMatchingFilesOnEveryRank) {
  const std::string timeline = prefixOf("RINGGUARD_TIMELINE"), summary = prefixOf("RINGGUARD_SUMMARY");
  ASSERT_FALSE(timeline.empty() || summary.empty()) << "ctest sets RINGGUARD_TIMELINE and RINGGUARD_SUMMARY";
  const int rank = testing::worldRank(), n = testing::worldSize();
  const std::vector<std::string> kinds = {"allreduce",      "allgather", "broadcast",
                                          "reduce_scatter", "alltoall",  "allreduce"};
  Options o;
  o.sliceBytes = 1024;
  o.timeout = std::chrono::milliseconds(60000);
  o.fault.mode = FaultMode::kRetransmit;  // the first retransmission is hit too: two repair rounds
  o.fault.schedule = {{0, 0, 1, 1}, {1, 1, 0, 0}, {5, 0, 2, n - 1}};
  Counters mine;
  {
    std::unique_ptr<Communicator> comm = testing::makeComm(o);
    constexpr size_t kCount = 3000;
    std::vector<uint8_t> in = testing::makeInput(DataType::kInt32, ReduceOp::kSum, rank, kCount * size_t(n));
    std::vector<uint8_t> out(in.size() * size_t(n));
    ASSERT_TRUE(comm->allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(comm->allgather(in.data(), out.data(), kCount, DataType::kInt32).isOk());
    ASSERT_TRUE(comm->broadcast(in.data(), out.data(), kCount, DataType::kInt32, n - 1).isOk());
    ASSERT_TRUE(comm->reduceScatter(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
    ASSERT_TRUE(comm->alltoall(in.data(), out.data(), kCount, DataType::kInt32).isOk());
    ASSERT_TRUE(comm->allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum).isOk());
    mine = comm->counters();
  }  // destroyed: the files are written now
  EXPECT_EQ(testing::sumOverRanks(mine.detected), 2 * o.fault.schedule.size());  // retransmit mode: twice

  // This rank's summary is its counters, field by field.
  const json s = readJson(summary + "." + std::to_string(rank) + ".json");
  ASSERT_EQ(s.at("rank"), rank);
  ASSERT_EQ(s.at("communicators").size(), 1u);
  const json& c = s.at("communicators")[0];
  EXPECT_EQ(c.at("transport"), "shm");  // the ranks share a host: shared memory over MPI
  EXPECT_FALSE(c.at("live").get<bool>());
  mine.forEach(
      [&](const char* name, uint64_t value) { EXPECT_EQ(c.at("counters").at(name), value) << name; });
  EXPECT_EQ(c.at("collectives").at("allreduce").at("calls"), 2);
  EXPECT_EQ(c.at("collectives").at("allreduce").at("bytes"), 2 * 3000 * 4);

  MPI_Barrier(MPI_COMM_WORLD);  // every rank's files are written
  std::vector<testing::TrackEvents> ranks;
  std::vector<Counters> counters(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const json t = readJson(timeline + "." + std::to_string(r) + ".json");
    testing::checkTraceFormat(t);
    EXPECT_EQ(t.at("otherData").at("rank"), r);
    const std::map<uint32_t, std::string> labels = testing::trackLabels(t);
    ASSERT_EQ(labels.size(), 1u) << "one communicator per process";
    EXPECT_EQ(labels.begin()->second,
              "comm (shm, rank " + std::to_string(r) + " of " + std::to_string(n) + ")");
    ranks.push_back(testing::eventsOfTrack(t, labels.begin()->first, r));
    // Rank r's counters, from its summary (checked against its communicator by rank r itself).
    const json rs = readJson(summary + "." + std::to_string(r) + ".json");
    Counters& rc = counters[size_t(r)];
    const json& rcs = rs.at("communicators")[0].at("counters");
    rc.slicesVerified = rcs.at("slices_verified");
    rc.detected = rcs.at("detected");
    rc.retransmitted = rcs.at("retransmitted");
    rc.repairRounds = rcs.at("repair_rounds");
  }
  EXPECT_EQ(testing::checkFaultyRun(ranks, counters, kinds), 2 * o.fault.schedule.size());
}

}  // namespace
}  // namespace ringguard
