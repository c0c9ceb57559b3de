// GradientAggregator under mpirun: results against a single-process run, zero-copy accounting, overlap with
// backward, unused parameters, no_sync, and mismatched models; on CPU tensors over the MPI host transport,
// and (AggregatorCuda, skipped with the reason where CUDA is not usable) on CUDA tensors over the device
// communicator: buckets in the device pool, streams ordered by events, ranks sharing one GPU.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "ringguard/core/crc32.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/torch/gradient_aggregator.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ringguard/runtime/mpi_device_communicator.h"
#endif

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

// Initialised on the CPU and then moved, so every device starts from the same parameters.
Net makeNet(int64_t hidden = kHidden, const torch::Device& dev = torch::kCPU) {
  torch::manual_seed(1234);  // identical initial parameters on every rank
  Net net(hidden);
  if (!dev.is_cpu()) net->to(dev);
  return net;
}

// The global batch of a step (the same on every rank); rank r trains on rows [r*kPerRank, (r+1)*kPerRank).
std::pair<torch::Tensor, torch::Tensor> globalBatch(int step, int world,
                                                    const torch::Device& dev = torch::kCPU) {
  torch::manual_seed(100 + step);
  torch::Tensor x = torch::randn({world * kPerRank, kIn});
  torch::Tensor y = torch::randn({world * kPerRank, kOut});
  return {x.to(dev), y.to(dev)};
}

std::unique_ptr<Communicator> makeComm(const Options& o) {
  std::unique_ptr<Communicator> c;
  Status st = mpi::createCommunicator(o, &c);
  if (!st.isOk()) MPI_Abort(MPI_COMM_WORLD, 3);
  return c;
}

// What a test runs on: where the parameters live and the communicator that moves them.
struct Target {
  torch::Device dev = torch::kCPU;
  std::function<std::unique_ptr<Communicator>(const Options&)> comm = makeComm;
};

struct RunResult {
  std::vector<torch::Tensor> params;  // on the CPU
  std::vector<StepStats> stats;
  std::vector<std::string> trace;
};

std::vector<torch::Tensor> hostCopies(Net& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().to(torch::kCPU).clone());
  return out;
}

// Every parameter's .grad lies inside its bucket, on the aggregator's device: nothing was copied aside.
void expectGradsInBuckets(Net& net, const GradientAggregator& agg) {
  auto named = namedParams(net);
  for (size_t i = 0; i < named.size(); ++i) {
    const torch::Tensor& g = named[i].second.grad();
    ASSERT_TRUE(g.defined()) << named[i].first;
    const torch::Tensor& b = agg.bucket(agg.bucketOf(i));
    EXPECT_EQ(g.device(), agg.device()) << named[i].first;
    EXPECT_EQ(b.device(), agg.device()) << named[i].first;
    auto* lo = static_cast<const char*>(b.data_ptr());
    auto* at = static_cast<const char*>(g.data_ptr());
    EXPECT_TRUE(at >= lo && at + g.nbytes() <= lo + b.nbytes()) << named[i].first << " is not in its bucket";
  }
}

// K steps of SGD with the aggregator on this rank's shard.
RunResult train(Communicator* comm, int steps, bool setToNone, size_t bucketBytes,
                bool useSideOnRank0 = false, const torch::Device& dev = torch::kCPU) {
  Net net = makeNet(kHidden, dev);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  AggregatorOptions ao;
  ao.bucketBytes = bucketBytes;
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm, namedParams(net), ao, &agg);
  EXPECT_TRUE(st.isOk()) << st.toString();
  RunResult r;
  if (!agg) return r;
  const int me = rankOf(), n = sizeOf();
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = globalBatch(s, n, dev);
    opt.zero_grad(setToNone);
    torch::Tensor out = net->forward(x.narrow(0, me * kPerRank, kPerRank), useSideOnRank0 && me == 0);
    torch::mse_loss(out, y.narrow(0, me * kPerRank, kPerRank)).backward();
    StepStats stats;
    st = agg->finish(&stats);
    EXPECT_TRUE(st.isOk()) << st.toString();
    r.stats.push_back(stats);
    r.trace = agg->trace();
    if (!setToNone) expectGradsInBuckets(net, *agg);
    opt.step();
  }
  r.params = hostCopies(net);
  return r;
}

// The same K steps in one process on the concatenated batch.
std::vector<torch::Tensor> trainSingleProcess(int steps, bool useSideOnRank0 = false,
                                              const torch::Device& dev = torch::kCPU) {
  Net net = makeNet(kHidden, dev);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  const int n = sizeOf();
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = globalBatch(s, n, dev);
    opt.zero_grad();
    torch::Tensor loss = torch::zeros({}, dev);
    // Mean over ranks of each shard's mean loss == the mean loss of the concatenated batch (equal shards);
    // the side layer only sees rank 0's shard, as in the distributed run.
    for (int r = 0; r < n; ++r) {
      torch::Tensor out = net->forward(x.narrow(0, r * kPerRank, kPerRank), useSideOnRank0 && r == 0);
      loss = loss + torch::mse_loss(out, y.narrow(0, r * kPerRank, kPerRank)) / n;
    }
    loss.backward();
    opt.step();
  }
  return hostCopies(net);
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

// ---- the checks, on CPU (Aggregator) and CUDA (AggregatorCuda) ------------------------------------------

void checkEqualsSingleProcessRunAndZeroCopies(const Target& t) {
  auto comm = t.comm(Options());
  RunResult r = train(comm.get(), 5, /*setToNone=*/false, /*bucketBytes=*/1024, false, t.dev);
  expectClose(r.params, trainSingleProcess(5, false, t.dev));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
  for (const StepStats& s : r.stats) {
    EXPECT_EQ(s.gradCopies, 0u);
    EXPECT_GT(s.buckets, 1);
    EXPECT_EQ(s.counters.collectives, uint64_t(s.buckets));
  }
}

void checkZeroGradSetToNone(const Target& t) {
  auto comm = t.comm(Options());
  RunResult r = train(comm.get(), 5, /*setToNone=*/true, 1024, false, t.dev);
  expectClose(r.params, trainSingleProcess(5, false, t.dev));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
  // zero_grad(set_to_none) runs before every backward, which then installs fresh grad tensors: one
  // counted copy per parameter that gets a gradient (fc1 and fc2: 4 tensors; `side` is unused here).
  for (size_t s = 0; s < r.stats.size(); ++s) EXPECT_EQ(r.stats[s].gradCopies, 4u) << "step " << s;
}

void checkFaultInjectionBitIdentical(const Target& t) {
  // The reference is the same configuration with no injection made. A schedule keeps `auto` off the peer
  // windows (docs/GPU.md), whose one-shot adds in rank order where the pipeline's ring adds in ring order:
  // at 3 ranks and more the sums differ in their last bits by route alone. So the reference has a schedule
  // too, one entry that no call of this run reaches, and takes the faulty run's route.
  Options reference;
  reference.fault.schedule = {{uint64_t(1) << 40, 0, 0, 0}};
  auto clean = t.comm(reference);
  Options o;
  o.sliceBytes = 256;
  o.fault.mode = FaultMode::kMultiBit;
  o.fault.probability = 0.05;
  o.fault.seed = 7;
  o.fault.schedule = {{0, 0, 0, 1 % sizeOf()}};
  auto faulty = t.comm(o);
  EXPECT_STREQ(clean->transportName(), faulty->transportName());
  RunResult a = train(clean.get(), 5, false, 1024, false, t.dev);
  RunResult b = train(faulty.get(), 5, false, 1024, false, t.dev);
  for (const StepStats& s : a.stats) EXPECT_EQ(s.counters.injected, 0u);
  ASSERT_EQ(a.params.size(), b.params.size());
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

void checkLaunchOrder(const Target& t) {
  auto comm = t.comm(Options());
  RunResult r = train(comm.get(), 1, false, 256, false, t.dev);
  ASSERT_FALSE(r.trace.empty());
  auto launch0 = std::find(r.trace.begin(), r.trace.end(), "launch:0");
  auto end = std::find(r.trace.begin(), r.trace.end(), "backward_end");
  ASSERT_NE(launch0, r.trace.end());
  ASSERT_NE(end, r.trace.end());
  EXPECT_LT(launch0 - r.trace.begin(), end - r.trace.begin()) << "bucket 0 was not launched during backward";
  EXPECT_GE(r.stats[0].bucketsLaunched, 1);
  // Every bucket exactly once, in index order (the same sequence of collectives on every rank).
  std::vector<std::string> launches;
  for (const std::string& e : r.trace) {
    if (e.rfind("launch:", 0) == 0) launches.push_back(e);
  }
  ASSERT_EQ(int(launches.size()), r.stats[0].buckets);
  for (size_t b = 0; b < launches.size(); ++b) EXPECT_EQ(launches[b], "launch:" + std::to_string(b));
}

void checkUnusedParameters(const Target& t) {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  auto comm = t.comm(o);
  RunResult r = train(comm.get(), 3, false, 1024, /*useSideOnRank0=*/true, t.dev);
  expectClose(r.params, trainSingleProcess(3, /*useSideOnRank0=*/true, t.dev));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
}

void checkNoSync(const Target& t) {
  auto comm = t.comm(Options());
  const int me = rankOf(), n = sizeOf();
  Net net = makeNet(kHidden, t.dev);
  AggregatorOptions ao;
  ao.bucketBytes = 1024;
  std::unique_ptr<GradientAggregator> agg;
  ASSERT_TRUE(GradientAggregator::create(comm.get(), namedParams(net), ao, &agg).isOk());
  for (auto& p : net->parameters()) p.mutable_grad().zero_();
  auto [x, y] = globalBatch(0, n, t.dev);
  auto [x2, y2] = globalBatch(1, n, t.dev);
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
  Net ref = makeNet(kHidden, t.dev);
  torch::Tensor loss = torch::zeros({}, t.dev);
  for (int r = 0; r < n; ++r) {
    loss = loss + (torch::mse_loss(ref->forward(x.narrow(0, r * kPerRank, kPerRank)),
                                   y.narrow(0, r * kPerRank, kPerRank)) +
                   torch::mse_loss(ref->forward(x2.narrow(0, r * kPerRank, kPerRank)),
                                   y2.narrow(0, r * kPerRank, kPerRank))) /
                      n;
  }
  loss.backward();
  std::vector<torch::Tensor> got, want;
  for (auto& p : net->parameters()) got.push_back(p.grad().to(torch::kCPU).clone());
  for (auto& p : ref->parameters())
    want.push_back(p.grad().defined() ? p.grad().to(torch::kCPU).clone()
                                      : torch::zeros_like(p).to(torch::kCPU));
  expectClose(got, want);
}

// Gradient outliers (docs/REPLICAS.md): each bucket's local norm before its allreduce, gathered in finish().
// Clean steps report nothing; the last rank's loss x1000 at step 2 is named at step 2 on every rank, in
// every bucket that has gradients (with 2 ranks both are named: the other's norm is the only median).
void checkGradientOutliers(const Target& t) {
  auto comm = t.comm(Options());
  const int me = rankOf(), n = sizeOf();
  Net net = makeNet(kHidden, t.dev);
  AggregatorOptions ao;
  ao.bucketBytes = 1024;
  ao.outlierFactor = 8.0;
  std::unique_ptr<GradientAggregator> agg;
  ASSERT_TRUE(GradientAggregator::create(comm.get(), namedParams(net), ao, &agg).isOk());
  std::vector<StepStats> steps;
  for (int s = 0; s < 4; ++s) {
    auto [x, y] = globalBatch(s, n, t.dev);
    for (auto& p : net->parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    torch::Tensor loss = torch::mse_loss(net->forward(x.narrow(0, me * kPerRank, kPerRank)),
                                         y.narrow(0, me * kPerRank, kPerRank));
    if (s == 2 && me == n - 1) loss = loss * 1000.0;
    loss.backward();
    StepStats stats;
    ASSERT_TRUE(agg->finish(&stats).isOk());
    steps.push_back(stats);
  }
  ASSERT_GE(steps[2].buckets, 2);
  for (int s : {0, 1, 3}) EXPECT_EQ(steps[size_t(s)].outliers, "") << "step " << s;
  const std::string first =
      "gradient outliers: step 2, bucket 0: rank " + std::to_string(n >= 3 ? n - 1 : 0) + " at ";
  EXPECT_EQ(steps[2].outliers.rfind(first, 0), 0u) << steps[2].outliers;
  // Every bucket with a gradient (the unused side branch's bucket is 0 everywhere: not an outlier).
  EXPECT_NE(steps[2].outliers.find("; gradient outliers: step 2, bucket 1: "), std::string::npos)
      << steps[2].outliers;
  if (n >= 3) EXPECT_EQ(steps[2].outliers.find("rank 0 at"), std::string::npos) << steps[2].outliers;
}

// ---- CPU -------------------------------------------------------------------------------------------------

class Aggregator : public ::testing::Test {
 protected:
  void SetUp() override { MPI_Barrier(MPI_COMM_WORLD); }
};

TEST_F(Aggregator, EqualsSingleProcessRunAndZeroCopiesWithZeroGradFalse) {
  checkEqualsSingleProcessRunAndZeroCopies(Target());
}

TEST_F(Aggregator, ZeroGradSetToNoneCopiesOncePerParameterAndStaysCorrect) {
  checkZeroGradSetToNone(Target());
}

TEST_F(Aggregator, FaultInjectionGivesBitIdenticalParameters) { checkFaultInjectionBitIdentical(Target()); }

TEST_F(Aggregator, FirstBucketLaunchesBeforeBackwardEnds) { checkLaunchOrder(Target()); }

TEST_F(Aggregator, UnusedParametersOnSomeRanksContributeZerosAndNothingHangs) {
  checkUnusedParameters(Target());
}

TEST_F(Aggregator, NoSyncAccumulatesWithoutCommunicating) { checkNoSync(Target()); }

TEST_F(Aggregator, GradientOutliersNameTheScaledRankOnEveryRank) { checkGradientOutliers(Target()); }

TEST_F(Aggregator, ParameterShapesDifferingAcrossRanksFailAtConstructionNamingTheParameter) {
  auto comm = makeComm(Options());
  Net net = makeNet(rankOf() == 1 ? kHidden + 1 : kHidden);
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm.get(), namedParams(net), AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter 'fc1.weight'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("differs across ranks"), std::string::npos) << st.message();
}

// Device checks are local and come before any communication; the meta device stands in for "not the CPU"
// on machines without a GPU (AggregatorCuda covers real CUDA tensors).
TEST_F(Aggregator, ParametersOnMixedDevicesFailAtConstructionNamingTheParameter) {
  auto comm = makeComm(Options());
  const uint64_t before = comm->counters().collectives;
  torch::Tensor a = torch::zeros({4}, torch::TensorOptions().requires_grad(true));
  torch::Tensor b = torch::zeros({4}, torch::TensorOptions().device(torch::kMeta).requires_grad(true));
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm.get(), {{"a", a}, {"b", b}}, AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter 'b'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("one device"), std::string::npos) << st.message();
  st = GradientAggregator::create(comm.get(), {{"b", b}}, AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter 'b' is on meta"), std::string::npos) << st.message();
  EXPECT_EQ(comm->counters().collectives, before);
}

// ---- CUDA ------------------------------------------------------------------------------------------------

// All ranks agree whether CUDA is usable, so they skip (or run) together.
bool cudaUsable(std::string* why) {
#if RINGGUARD_TORCH_CUDA
  const int mine = torch::cuda::is_available() ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all)
    *why = mine ? "torch::cuda::is_available() is false on another rank"
                : "torch::cuda::is_available() is false";
  return all != 0;
#else
  *why = "this build of ringguard has no CUDA support (RINGGUARD_WITH_CUDA=OFF)";
  return false;
#endif
}

int localRank() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

#if RINGGUARD_TORCH_CUDA
// A device communicator on GPU `device` (transport from RINGGUARD_DEVICE_TRANSPORT unless `kind` is given).
std::unique_ptr<Communicator> makeDeviceComm(
    const Options& o, int device, cuda::DeviceTransportKind kind = cuda::DeviceTransportKind::kAuto,
    bool kindFromEnv = true) {
  cuda::DeviceOptions d;
  if (kindFromEnv) {
    Status st = cuda::DeviceOptions::fromEnv(&d);
    if (!st.isOk()) {
      fprintf(stderr, "DeviceOptions::fromEnv: %s\n", st.toString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  } else {
    d.transport = kind;
  }
  d.device = device;
  std::unique_ptr<Communicator> c;
  Status st = cuda::createDeviceCommunicator(o, d, &c);
  if (!st.isOk()) {
    fprintf(stderr, "createDeviceCommunicator: %s\n", st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return c;
}
#endif

class AggregatorCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Barrier(MPI_COMM_WORLD);
    std::string why;
    if (!cudaUsable(&why)) GTEST_SKIP() << "CUDA not usable: " << why;
#if RINGGUARD_TORCH_CUDA
    // The GPU createDeviceCommunicator picks by default: node-local rank modulo the visible GPUs.
    gpu_ = localRank() % int(torch::cuda::device_count());
    c10::cuda::set_device(c10::DeviceIndex(gpu_));
#endif
  }
  Target target() const {
    Target t;
    t.dev = torch::Device(torch::kCUDA, c10::DeviceIndex(gpu_));
#if RINGGUARD_TORCH_CUDA
    const int gpu = gpu_;
    t.comm = [gpu](const Options& o) { return makeDeviceComm(o, gpu); };
#endif
    return t;
  }
  int gpu_ = 0;
};

TEST_F(AggregatorCuda, EqualsSingleProcessRunAndZeroCopiesWithZeroGradFalse) {
  checkEqualsSingleProcessRunAndZeroCopies(target());
}

TEST_F(AggregatorCuda, ZeroGradSetToNoneCopiesOncePerParameterAndStaysCorrect) {
  checkZeroGradSetToNone(target());
}

TEST_F(AggregatorCuda, FaultInjectionGivesBitIdenticalParameters) {
  checkFaultInjectionBitIdentical(target());
}

TEST_F(AggregatorCuda, BucketsLaunchInOrderAndTheFirstBeforeBackwardEnds) { checkLaunchOrder(target()); }

TEST_F(AggregatorCuda, UnusedParametersOnSomeRanksContributeZerosAndNothingHangs) {
  checkUnusedParameters(target());
}

TEST_F(AggregatorCuda, NoSyncAccumulatesWithoutCommunicating) { checkNoSync(target()); }

TEST_F(AggregatorCuda, GradientOutliersNameTheScaledRankOnEveryRank) { checkGradientOutliers(target()); }

// Backward on a side stream, finish() and the optimizer step on the default stream: the hooks' events
// order the launches (and, for a bucket launched in finish() after gradients made on the side stream, the
// default stream), and finish() orders the default stream after every result. One bucket with an unused
// parameter on ranks > 0 takes the second path; small buckets the first.
TEST_F(AggregatorCuda, GradientsMadeOnAnotherStreamAreOrderedByEvents) {
#if RINGGUARD_TORCH_CUDA
  const Target t = target();
  const int me = rankOf(), n = sizeOf();
  for (size_t bucketBytes : {size_t(256), size_t(1) << 20}) {
    SCOPED_TRACE("bucketBytes " + std::to_string(bucketBytes));
    auto comm = t.comm(Options());
    Net net = makeNet(kHidden, t.dev);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
    AggregatorOptions ao;
    ao.bucketBytes = bucketBytes;
    std::unique_ptr<GradientAggregator> agg;
    ASSERT_TRUE(GradientAggregator::create(comm.get(), namedParams(net), ao, &agg).isOk());
    c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(t.dev.index());
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, t.dev.index());
    ASSERT_NE(main.stream(), side.stream());
    for (int s = 0; s < 3; ++s) {
      {
        c10::cuda::CUDAEvent stepDone;  // the side stream reads what the last optimizer step wrote
        stepDone.record(main);
        stepDone.block(side);
        c10::cuda::CUDAStreamGuard guard(side);
        auto [x, y] = globalBatch(s, n, t.dev);
        opt.zero_grad(false);
        torch::Tensor out = net->forward(x.narrow(0, me * kPerRank, kPerRank), /*useSide=*/me == 0);
        torch::mse_loss(out, y.narrow(0, me * kPerRank, kPerRank)).backward();
      }
      StepStats stats;
      Status st = agg->finish(&stats);  // on `main`
      ASSERT_TRUE(st.isOk()) << st.toString();
      EXPECT_EQ(stats.gradCopies, 0u);
      opt.step();
    }
    std::vector<torch::Tensor> got = hostCopies(net);
    expectClose(got, trainSingleProcess(3, /*useSideOnRank0=*/true, t.dev));
    EXPECT_TRUE(identicalAcrossRanks(got));
  }
#endif
}

TEST_F(AggregatorCuda, CudaParametersWithAHostCommunicatorFailNamingTheParameter) {
  auto comm = makeComm(Options());
  Net net = makeNet(kHidden, target().dev);
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm.get(), namedParams(net), AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter 'side.weight' is on cuda"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("createDeviceCommunicator"), std::string::npos) << st.message();
}

TEST_F(AggregatorCuda, CpuParametersWithADeviceCommunicatorFailAndMixedDevicesToo) {
  const Target t = target();
  auto comm = t.comm(Options());
  Net net = makeNet();
  std::unique_ptr<GradientAggregator> agg;
  Status st = GradientAggregator::create(comm.get(), namedParams(net), AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter 'side.weight' is on cpu"), std::string::npos) << st.message();
  auto named = namedParams(net);
  named[2].second = named[2].second.detach().to(t.dev).requires_grad_(true);  // fc1.weight on the GPU
  st = GradientAggregator::create(comm.get(), named, AggregatorOptions(), &agg);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("parameter '" + named[2].first + "' (index 2) is on cuda"), std::string::npos)
      << st.message();
}

// Several ranks on one GPU (device 0 for all, whatever the machine has) through the host-staged transport.
TEST_F(AggregatorCuda, SeveralRanksShareOneGpuThroughTheStagedTransport) {
#if RINGGUARD_TORCH_CUDA
  const torch::Device dev(torch::kCUDA, 0);
  c10::cuda::set_device(0);
  auto comm = makeDeviceComm(Options(), 0, cuda::DeviceTransportKind::kStaged, /*kindFromEnv=*/false);
  EXPECT_STREQ(comm->transportName(), "staged");
  RunResult r = train(comm.get(), 5, false, 1024, false, dev);
  expectClose(r.params, trainSingleProcess(5, false, dev));
  EXPECT_TRUE(identicalAcrossRanks(r.params));
  for (const StepStats& s : r.stats) {
    EXPECT_EQ(s.gradCopies, 0u);
    EXPECT_EQ(s.counters.collectives, uint64_t(s.buckets));
  }
#endif
}

}  // namespace
}  // namespace ringguard
