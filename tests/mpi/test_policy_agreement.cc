// The downgrade engine under mpirun: ranks see deliberately different local signals, and the collective
// family switches on every rank at the same step and the same collective sequence number, exactly as a
// single engine fed the MAX over ranks would; the local family decides per rank. Ranks with different
// rules or out-of-step boundaries get an error on every rank, never a hang or a split decision.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "ringguard/policy/engine.h"
#include "ringguard/policy/rules.h"
#include "ringguard/runtime/communicator.h"
#include "test_util.h"

namespace ringguard {
namespace {

using testing::makeComm;
using testing::worldRank;
using testing::worldSize;

// The agreement over a ringguard communicator: one verified MAX allreduce of the float64 vector. The policy
// layer leaves agreement to a callback so that it need not link the runtime; this is the one a C++ program
// over ringguard communicators writes (Python's is a torch.distributed MAX all_reduce).
PolicyAgreement communicatorAgreement(Communicator* comm) {
  return [comm](std::vector<double>* values) -> Status {
    return comm->allreduce(values->data(), values->data(), values->size(), DataType::kFloat64,
                           ReduceOp::kMax);
  };
}

const std::string kRules = std::string(RINGGUARD_SOURCE_DIR) + "/tests/unit/data/policy/rules_small.json";

PolicyRules rules(const std::string& edits = "") {
  PolicyRules r;
  Status st = loadRulesFile(kRules, edits, &r);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return r;
}

// Rank r's local PCIe utilisation at step s: a spike to 0.9 at step 2 + 2r only (so no rank alone sees
// saturation at the step where the agreed signal shows it, except its own), 0.1 otherwise. Rank r's
// fragmentation: high on odd ranks only.
Sample localSample(int rank, int step) {
  Sample s;
  s.timeNs = int64_t{step} * 1000000;
  s.signals.push_back(Signal::present("pcie", step == 2 + 2 * rank ? 0.9 : 0.1, "fraction", "test"));
  s.signals.push_back(Signal::present("frag", rank % 2 == 1 ? 0.7 : 0.1, "fraction", "test"));
  s.signals.push_back(Signal::present("ooms", 0, "count", "test"));
  return s;
}

constexpr int kSteps = 16;

TEST(PolicyAgreement, EveryRankSwitchesAtTheSameStepAndSequenceNumber) {
  const int rank = worldRank(), size = worldSize();
  auto comm = makeComm(Options{});
  PolicyEngine engine(rules());
  engine.setAgreement(communicatorAgreement(comm.get()));
  // The reference: one engine fed the MAX of the ranks' signals, without agreement.
  PolicyEngine reference(rules());

  std::vector<long long> switches;  // (step, collective number) per gather decision, flattened
  size_t seen = 0;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(engine.onStep(localSample(rank, step)).isOk());
    Sample maxed = localSample(0, step);
    for (int r = 1; r < size; ++r) {
      const Sample o = localSample(r, step);
      for (size_t i = 0; i < maxed.signals.size(); ++i) {
        maxed.signals[i].value = std::max(maxed.signals[i].value, o.signals[i].value);
      }
    }
    maxed.signals.resize(1);  // the reference decides only the collective family from the MAX
    ASSERT_TRUE(reference.onStep(maxed).isOk());
    const std::vector<PolicyDecision> d = engine.decisions();
    for (; seen < d.size(); ++seen) {
      if (d[seen].family != "gather") continue;
      EXPECT_TRUE(d[seen].agreed);
      switches.push_back(static_cast<long long>(d[seen].step));
      switches.push_back(static_cast<long long>(comm->counters().collectives));
    }
  }
  // Same decisions as the reference.
  std::vector<std::string> mine, ref;
  for (const PolicyDecision& d : engine.decisions()) {
    if (d.family == "gather") mine.push_back(std::to_string(d.step) + ":" + d.from + "->" + d.to);
  }
  for (const PolicyDecision& d : reference.decisions()) {
    if (d.family == "gather") ref.push_back(std::to_string(d.step) + ":" + d.from + "->" + d.to);
  }
  EXPECT_EQ(mine, ref);
  // The agreed PCIe signal spikes at steps 2, 4, ..., 2 + 2(N-1). Staged at 2 (no rank's own signal is
  // high there but rank 0's); at 3 the signal is below exit but the 2-step dwell holds; 4 re-enters; ring
  // at 5. Later spikes (np 4: at 8, switching back at 10) follow the same dwell, never a flap.
  ASSERT_GE(mine.size(), 3u);
  EXPECT_EQ(mine[0], "0:->ring");
  EXPECT_EQ(mine[1], "2:ring->staged");
  EXPECT_EQ(mine[2], "5:staged->ring");
  if (size == 4)
    EXPECT_EQ(mine, (std::vector<std::string>{"0:->ring", "2:ring->staged", "5:staged->ring",
                                              "8:ring->staged", "10:staged->ring"}));

  // Every rank has the same (step, collective number) list.
  const int n = static_cast<int>(switches.size());
  std::vector<int> counts(static_cast<size_t>(size));
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int c : counts) ASSERT_EQ(c, n);
  std::vector<long long> all(static_cast<size_t>(n) * static_cast<size_t>(size));
  MPI_Allgather(switches.data(), n, MPI_LONG_LONG, all.data(), n, MPI_LONG_LONG, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) {
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(all[static_cast<size_t>(r * n + i)], switches[static_cast<size_t>(i)])
          << "rank " << r << " entry " << i;
    }
  }
  // The local family followed each rank's own signal.
  EXPECT_EQ(engine.current("attention"), rank % 2 == 1 ? "lean" : "fast");
  EXPECT_EQ(engine.counters().agreements, static_cast<uint64_t>(kSteps));
}

// The shipped rules' allreduce transport choice: only the last rank's device pool fragments (steps 55-59,
// after the initial choice's 50-step dwell), yet every rank moves all_reduce to staged_chunked at step 55
// and at the same collective number, and back to the ring once the fragmentation is gone and the 50-step
// dwell has passed; all_gather (no PCIe signal) stays on the ring.
TEST(PolicyAgreement, TheDefaultAllReduceRuleSwitchesEveryRankTogether) {
  const int rank = worldRank(), size = worldSize();
  auto comm = makeComm(Options{});
  PolicyRules r;
  ASSERT_TRUE(parseRules(defaultRulesJson(), "default rules", "", &r).isOk());
  PolicyEngine engine(r);
  engine.setAgreement(communicatorAgreement(comm.get()));
  std::vector<long long> switches;  // (step, collective number) per all_reduce decision
  size_t seen = 0;
  for (int step = 0; step < 120; ++step) {
    Sample s;
    s.timeNs = int64_t{step} * 1000000;
    const bool fragmented = rank == size - 1 && step >= 55 && step < 60;
    s.signals.push_back(
        Signal::present("pool.device.fragmentation", fragmented ? 0.8 : 0.05, "fraction", "test"));
    ASSERT_TRUE(engine.onStep(s).isOk());
    const std::vector<PolicyDecision> d = engine.decisions();
    for (; seen < d.size(); ++seen) {
      if (d[seen].family != "all_reduce") continue;
      EXPECT_TRUE(d[seen].agreed);
      switches.push_back(static_cast<long long>(d[seen].step));
      switches.push_back(static_cast<long long>(comm->counters().collectives));
    }
  }
  std::vector<std::string> mine;
  for (const PolicyDecision& d : engine.decisions()) {
    if (d.family == "all_reduce") mine.push_back(std::to_string(d.step) + ":" + d.from + "->" + d.to);
  }
  EXPECT_EQ(mine,
            (std::vector<std::string>{"0:->ring", "55:ring->staged_chunked", "105:staged_chunked->ring"}));
  EXPECT_EQ(engine.current("all_gather"), "ring");
  const int n = static_cast<int>(switches.size());
  std::vector<long long> all(static_cast<size_t>(n) * static_cast<size_t>(size));
  MPI_Allgather(switches.data(), n, MPI_LONG_LONG, all.data(), n, MPI_LONG_LONG, MPI_COMM_WORLD);
  for (int q = 0; q < size; ++q) {
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(all[static_cast<size_t>(q * n + i)], switches[static_cast<size_t>(i)])
          << "rank " << q << " entry " << i;
    }
  }
}

TEST(PolicyAgreement, DifferentRulesAreAnErrorOnEveryRank) {
  const int rank = worldRank();
  auto comm = makeComm(Options{});
  PolicyEngine engine(rules(rank == 0 ? "/families/gather/min_dwell_steps=9" : ""));
  engine.setAgreement(communicatorAgreement(comm.get()));
  Status st = engine.onStep(localSample(rank, 0));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ranks loaded different rules"), std::string::npos) << st.message();
  EXPECT_EQ(engine.current("gather"), "");
}

TEST(PolicyAgreement, OutOfStepBoundariesAreAnErrorOnEveryRank) {
  const int rank = worldRank();
  auto comm = makeComm(Options{});
  PolicyEngine engine(rules());
  // Rank 0 runs one step boundary more (before the agreement is set: local only), then every rank calls
  // onStep once on the shared communicator: rank 0 is at step 1, the others at step 0.
  if (rank == 0) ASSERT_TRUE(engine.onStep(localSample(0, 0)).isOk());
  engine.setAgreement(communicatorAgreement(comm.get()));
  Status st = engine.onStep(localSample(rank, 1));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ranks are at different step boundaries"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ringguard
