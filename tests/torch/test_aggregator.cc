// GradientAggregator under mpirun (CPU tensors, MPI host transport): results against a single-process run,
// zero-copy accounting, overlap with backward, unused parameters, no_sync, and mismatched models.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "ringguard/core/crc32.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/torch/gradient_aggregator.h"

namespace ringguard {
namespace {

constexpr int64_t kIn = 16, kHidden = 32, kOut = 4, kPerRank = 8;

int rankOf() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int sizeOf() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t hidden = kHidden) {
    // Registered first, so it lands in the last bucket (reverse order): when unused it holds back only
    // that bucket, as in DDP.
    side = register_module("side",
                           torch::nn::Linear(kIn, kOut));  // used only when asked (unused-parameter tests)
    fc1 = register_module("fc1", torch::nn::Linear(kIn, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, kOut));
  }
  torch::Tensor forward(const torch::Tensor& x, bool useSide = false) {
    torch::Tensor y = fc2(torch::tanh(fc1(x)));
    return useSide ? y + side(x) : y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, side{nullptr};
};
TORCH_MODULE(Net);

std::vector<std::pair<std::string, torch::Tensor>> namedParams(Net& net) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : net->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

Net makeNet(int64_t hidden = kHidden) {
  torch::manual_seed(1234);  // identical initial parameters on every rank
  return Net(hidden);
}

// The global batch of a step (the same on every rank); rank r trains on rows [r*kPerRank, (r+1)*kPerRank).
std::pair<torch::Tensor, torch::Tensor> globalBatch(int step, int world) {
  torch::manual_seed(100 + step);
  torch::Tensor x = torch::randn({world * kPerRank, kIn});
  torch::Tensor y = torch::randn({world * kPerRank, kOut});
  return {x, y};
}

std::unique_ptr<Communicator> makeComm(const Options& o) {
  std::unique_ptr<Communicator> c;
  Status st = mpi::createCommunicator(MPI_COMM_WORLD, o, &c);
  if (!st.isOk()) MPI_Abort(MPI_COMM_WORLD, 3);
  return c;
}

struct RunResult {
  std::vector<torch::Tensor> params;
  std::vector<StepStats> stats;
  std::vector<std::string> trace;
};

// K steps of SGD with the aggregator on this rank's shard.
RunResult train(Communicator* comm, int steps, bool setToNone, size_t bucketBytes,
                bool useSideOnRank0 = false) {
  Net net = makeNet();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  AggregatorOptions ao;
  ao.bucketBytes = bucketBytes;
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm, namedParams(net), ao, &agg);
  EXPECT_TRUE(st.isOk()) << st.toString();
  RunResult r;
  const int me = rankOf(), n = sizeOf();
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = globalBatch(s, n);
    opt.zero_grad(setToNone);
    torch::Tensor out = net->forward(x.narrow(0, me * kPerRank, kPerRank), useSideOnRank0 && me == 0);
    torch::mse_loss(out, y.narrow(0, me * kPerRank, kPerRank)).backward();
    StepStats stats;
    st = agg->finish(&stats);
    EXPECT_TRUE(st.isOk()) << st.toString();
    r.stats.push_back(stats);
    r.trace = agg->trace();
    opt.step();
  }
  for (auto& p : net->parameters()) r.params.push_back(p.detach().clone());
  return r;
}

// The same K steps in one process on the concatenated batch.
std::vector<torch::Tensor> trainSingleProcess(int steps, bool useSideOnRank0 = false) {
  Net net = makeNet();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  const int n = sizeOf();
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = globalBatch(s, n);
    opt.zero_grad();
    torch::Tensor loss = torch::zeros({});
    // Mean over ranks of each shard's mean loss == the mean loss of the concatenated batch (equal shards);
    // the side layer only sees rank 0's shard, as in the distributed run.
    for (int r = 0; r < n; ++r) {
      torch::Tensor out = net->forward(x.narrow(0, r * kPerRank, kPerRank), useSideOnRank0 && r == 0);
      loss = loss + torch::mse_loss(out, y.narrow(0, r * kPerRank, kPerRank)) / n;
    }
    loss.backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

bool identicalAcrossRanks(const std::vector<torch::Tensor>& params) {
  uint32_t crc = 0;
  for (const auto& p : params) crc = crc32(p.data_ptr(), size_t(p.numel()) * p.element_size(), crc);
  uint32_t lo = 0, hi = 0;
  MPI_Allreduce(&crc, &lo, 1, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&crc, &hi, 1, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// f32 sums over a few dozen terms in a different order: each step differs by a few ulps (~1e-7
// relative), and 5 SGD steps with lr 0.1 do not amplify that beyond ~1e-6; 1e-5 leaves margin while
// any real error (a missing or doubled gradient) is orders of magnitude larger.
void expectClose(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-5, /*atol=*/1e-5))
        << "parameter " << i << " max diff " << (a[i] - b[i]).abs().max().item<float>();
  }
}

class Aggregator : public ::testing::Test {
 protected:
  void SetUp() override { MPI_Barrier(MPI_COMM_WORLD); }
};

TEST_F(Aggregator, EqualsSingleProcessRunAndZeroCopiesWithZeroGradFalse) {
  auto comm = makeComm(Options());
  RunResult r = train(comm.get(), 5, /*setToNone=*/false, /*bucketBytes=*/1024);
  expectClose(r.params, trainSingleProcess(5));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
  for (const StepStats& s : r.stats) {
    EXPECT_EQ(s.gradCopies, 0u);
    EXPECT_GT(s.buckets, 1);
    EXPECT_EQ(s.counters.collectives, uint64_t(s.buckets));
  }
}

TEST_F(Aggregator, ZeroGradSetToNoneCopiesOncePerParameterAndStaysCorrect) {
  auto comm = makeComm(Options());
  RunResult r = train(comm.get(), 5, /*setToNone=*/true, 1024);
  expectClose(r.params, trainSingleProcess(5));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
  // zero_grad(set_to_none) runs before every backward, which then installs fresh grad tensors: one
  // counted copy per parameter that gets a gradient (fc1 and fc2: 4 tensors; `side` is unused here).
  for (size_t s = 0; s < r.stats.size(); ++s) EXPECT_EQ(r.stats[s].gradCopies, 4u) << "step " << s;
}

TEST_F(Aggregator, FaultInjectionGivesBitIdenticalParameters) {
  auto clean = makeComm(Options());
  Options o;
  o.sliceBytes = 256;
  o.fault.mode = FaultMode::kMultiBit;
  o.fault.probability = 0.05;
  o.fault.seed = 7;
  o.fault.schedule = {{0, 0, 0, 1 % sizeOf()}};
  auto faulty = makeComm(o);
  RunResult a = train(clean.get(), 5, false, 1024);
  RunResult b = train(faulty.get(), 5, false, 1024);
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(a.params[i].data_ptr(), b.params[i].data_ptr(), a.params[i].nbytes())) << i;
  }
  uint64_t injected = 0, detected = 0;
  for (const StepStats& s : b.stats) {
    injected += s.counters.injected;
    detected += s.counters.detected;
  }
  uint64_t inj = 0, det = 0;
  MPI_Allreduce(&injected, &inj, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&detected, &det, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GE(inj, 1u);
  EXPECT_EQ(inj, det);
}

TEST_F(Aggregator, FirstBucketLaunchesBeforeBackwardEnds) {
  auto comm = makeComm(Options());
  RunResult r = train(comm.get(), 1, false, 256);
  ASSERT_FALSE(r.trace.empty());
  auto launch0 = std::find(r.trace.begin(), r.trace.end(), "launch:0");
  auto end = std::find(r.trace.begin(), r.trace.end(), "backward_end");
  ASSERT_NE(launch0, r.trace.end());
  ASSERT_NE(end, r.trace.end());
  EXPECT_LT(launch0 - r.trace.begin(), end - r.trace.begin()) << "bucket 0 was not launched during backward";
  EXPECT_GE(r.stats[0].bucketsLaunched, 1);
}

TEST_F(Aggregator, UnusedParametersOnSomeRanksContributeZerosAndNothingHangs) {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  auto comm = makeComm(o);
  RunResult r = train(comm.get(), 3, false, 1024, /*useSideOnRank0=*/true);
  expectClose(r.params, trainSingleProcess(3, /*useSideOnRank0=*/true));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
}

TEST_F(Aggregator, NoSyncAccumulatesWithoutCommunicating) {
  auto comm = makeComm(Options());
  const int me = rankOf(), n = sizeOf();
  Net net = makeNet();
  AggregatorOptions ao;
  ao.bucketBytes = 1024;
  std::unique_ptr<GradientAggregator> agg;
  ASSERT_TRUE(GradientAggregator::create(comm.get(), namedParams(net), ao, &agg).isOk());
  for (auto& p : net->parameters()) p.mutable_grad().zero_();
  auto [x, y] = globalBatch(0, n);
  auto [x2, y2] = globalBatch(1, n);
  const uint64_t before = comm->counters().collectives;
  agg->setNoSync(true);
  torch::mse_loss(net->forward(x.narrow(0, me * kPerRank, kPerRank)), y.narrow(0, me * kPerRank, kPerRank))
      .backward();
  ASSERT_TRUE(agg->finish(nullptr).isOk());
  EXPECT_EQ(comm->counters().collectives, before) << "no_sync must not communicate";
  agg->setNoSync(false);
  torch::mse_loss(net->forward(x2.narrow(0, me * kPerRank, kPerRank)), y2.narrow(0, me * kPerRank, kPerRank))
      .backward();
  ASSERT_TRUE(agg->finish(nullptr).isOk());
  // Reference: the same two losses in one process, summed per rank and averaged over ranks.
  Net ref = makeNet();
  torch::Tensor loss = torch::zeros({});
  for (int r = 0; r < n; ++r) {
    loss = loss + (torch::mse_loss(ref->forward(x.narrow(0, r * kPerRank, kPerRank)),
                                   y.narrow(0, r * kPerRank, kPerRank)) +
                   torch::mse_loss(ref->forward(x2.narrow(0, r * kPerRank, kPerRank)),
                                   y2.narrow(0, r * kPerRank, kPerRank))) /
                      n;
  }
  loss.backward();
  std::vector<torch::Tensor> got, want;
  for (auto& p : net->parameters()) got.push_back(p.grad().clone());
  for (auto& p : ref->parameters())
    want.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  expectClose(got, want);
}

TEST_F(Aggregator, ParameterShapesDifferingAcrossRanksFailAtConstructionNamingTheParameter) {
  auto comm = makeComm(Options());
  Net net = makeNet(rankOf() == 1 ? kHidden + 1 : kHidden);
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm.get(), namedParams(net), AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter 'fc1.weight'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("differs across ranks"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ringguard
