// A one-rank device communicator's collectives (runtime/device/one_rank_path.h): copies on the caller's
// stream that never wait on the host and can be captured in a CUDA graph; RINGGUARD_NAN_CHECK and a
// transport named explicitly keep the host-driven path. Made over the unit suites' in-memory bootstrap.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "memory_bootstrap.h"
#include "ringguard/runtime/device_factory.h"

namespace ringguard {
namespace {

using testing::Board;
using testing::MemoryBootstrap;

// Options with the NaN scan off whatever the environment says (RINGGUARD_NAN_CHECK would keep the pipeline).
Options unscanned() {
  Options o;
  o.nanCheck = NanCheck::kOff;
  return o;
}

std::unique_ptr<Communicator> makeOneRank(cuda::DeviceTransportKind kind, const Options& o = unscanned()) {
  Board board(1);
  MemoryBootstrap b(&board, 0);
  cuda::DeviceOptions d;
  d.transport = kind;
  d.device = 0;
  std::unique_ptr<Communicator> c;
  const Status st = cuda::createDeviceCommunicator(b, o, d, &c);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return c;
}

float* upload(const std::vector<float>& host, std::vector<float*>* owned) {
  float* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(host.size(), 1) * sizeof(float)),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  // A copy from pageable memory may return before its DMA lands; the tests' stream is non-blocking.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  owned->push_back(d);
  return d;
}

std::vector<float> download(const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

std::vector<float> ramp(size_t n, int offset) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(offset + int(i % 1009));
  return v;
}

// Holds `s` with a host function until `open` is set (20 s at most, so a call that waits shows as a
// failure, not a hang).
void hold(cudaStream_t s, std::atomic<bool>* open) {
  const auto wait = [](void* p) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!static_cast<std::atomic<bool>*>(p)->load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  ASSERT_EQ(cudaLaunchHostFunc(s, wait, open), cudaSuccess);
}

// Each test's stream and device buffers (upload(..., &owned_)), released after it.
class OneRankPath : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    for (float* p : owned_) cudaFree(p);
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  cudaStream_t s_ = nullptr;
  std::vector<float*> owned_;
};

// Every collective (in place and not) returns while its stream is held, its Work already complete, and is
// exact once the stream runs; the communicator keeps its transport's name.
TEST_F(OneRankPath, EveryCollectiveIsACopyOnTheCallersStreamWithNoHostWait) {
  std::unique_ptr<Communicator> c = makeOneRank(cuda::DeviceTransportKind::kAuto);
  ASSERT_TRUE(c);
  EXPECT_STREQ(c->transportName(), cuda::haveNccl() ? "nccl" : "staged");
  const cudaStream_t s = s_;
  const size_t n = 3000;
  float* inPlace = upload(ramp(n, 1), &owned_);
  float* sendA = upload(ramp(n, 2), &owned_);
  float* recvA = upload(std::vector<float>(n, -1.f), &owned_);
  float* gatherOut = upload(std::vector<float>(n, -1.f), &owned_);
  float* bcast = upload(std::vector<float>(n, -1.f), &owned_);
  float* scatterOut = upload(std::vector<float>(n, -1.f), &owned_);
  float* allOut = upload(std::vector<float>(n, -1.f), &owned_);
  float* splitOut = upload(std::vector<float>(n + 8, -1.f), &owned_);
  float* avgIn = upload(ramp(n, 3), &owned_);
  float* avg = upload(std::vector<float>(n, -1.f), &owned_);

  std::atomic<bool> open{false};
  hold(s, &open);
  std::vector<std::pair<std::string, std::shared_ptr<Work>>> works;
  const auto issued = [&](const char* what, std::shared_ptr<Work> w) {
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << what << " returned only after its stream ran";
    EXPECT_TRUE(w->isCompleted()) << what << ": its Work waits for the stream (the host-driven path)";
    works.emplace_back(what, std::move(w));
  };
  issued("allreduce in place", c->allreduceAsync(inPlace, inPlace, n, DataType::kFloat32, ReduceOp::kSum, s));
  issued("allreduce", c->allreduceAsync(sendA, recvA, n, DataType::kFloat32, ReduceOp::kMax, s));
  issued("allreduce avg", c->allreduceAsync(avgIn, avg, n, DataType::kFloat32, ReduceOp::kAvg, s));
  issued("allgather", c->allgatherAsync(sendA, gatherOut, n, DataType::kFloat32, s));
  issued("broadcast", c->broadcastAsync(sendA, bcast, n, DataType::kFloat32, 0, s));
  issued("reduce_scatter",
         c->reduceScatterAsync(sendA, scatterOut, n, DataType::kFloat32, ReduceOp::kSum, s));
  issued("alltoall", c->alltoallAsync(sendA, allOut, n, DataType::kFloat32, s));
  // The split form: 100 elements from offset 5 of the input land at offset 8 of the output.
  issued("alltoall split", c->alltoallAsync(sendA, {100}, {5}, splitOut, {100}, {8}, DataType::kFloat32, s));
  open.store(true);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  for (auto& [what, w] : works) EXPECT_TRUE(w->wait().isOk()) << what;

  EXPECT_EQ(download(inPlace, n), ramp(n, 1));
  EXPECT_EQ(download(recvA, n), ramp(n, 2));
  EXPECT_EQ(download(avg, n), ramp(n, 3));  // an average over one rank divides by 1
  EXPECT_EQ(download(gatherOut, n), ramp(n, 2));
  EXPECT_EQ(download(bcast, n), ramp(n, 2));
  EXPECT_EQ(download(scatterOut, n), ramp(n, 2));
  EXPECT_EQ(download(allOut, n), ramp(n, 2));
  const std::vector<float> split = download(splitOut, n + 8), from = ramp(n, 2);
  for (size_t i = 0; i < split.size(); ++i) {
    const float want = i >= 8 && i < 108 ? from[i - 8 + 5] : -1.f;
    ASSERT_EQ(split[i], want) << "split all-to-all, output index " << i;
  }
  const CollectiveStats ar = c->summary().byKind.at("allreduce");
  EXPECT_EQ(ar.calls, 3u);
  EXPECT_EQ(ar.failed, 0u);
  EXPECT_EQ(c->counters().collectives, 8u);
}

// Captured in a CUDA graph (global capture mode: any stream synchronisation or event query in the calls
// would invalidate it) and replayed over new inputs: each replay copies what the buffers hold then.
TEST_F(OneRankPath, CollectivesReplayInACudaGraph) {
  std::unique_ptr<Communicator> c = makeOneRank(cuda::DeviceTransportKind::kAuto);
  ASSERT_TRUE(c);
  const cudaStream_t s = s_;
  const size_t n = 1 << 16;
  float* in = upload(ramp(n, 0), &owned_);
  float* sum = upload(std::vector<float>(n, -1.f), &owned_);
  float* gathered = upload(std::vector<float>(n, -1.f), &owned_);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const Status a = c->allreduceAsync(in, sum, n, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  const Status b = c->allgatherAsync(sum, gathered, n, DataType::kFloat32, s)->wait();
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  ASSERT_STATUS_OK(a);
  ASSERT_STATUS_OK(b);
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 1; replay <= 2; ++replay) {
    const std::vector<float> next = ramp(n, 100 * replay);
    // On the graph's stream: cudaMemcpy from pageable memory may return before its DMA has landed, and the
    // non-blocking stream would not wait for it (replay 2 once read a part of `in` still old, on an H100).
    ASSERT_CUDA(cudaMemcpyAsync(in, next.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    ASSERT_CUDA(cudaGraphLaunch(exec, s));
    ASSERT_CUDA(cudaStreamSynchronize(s));
    EXPECT_EQ(download(sum, n), next) << "replay " << replay;
    EXPECT_EQ(download(gathered, n), next) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The NaN/Inf scan is a host step of the pipeline: with it on, a one-rank collective still takes that path
// and a NaN in its input fails the call, as it did before the path existed. So does a transport named
// explicitly: the pipeline refuses a stream being captured into a CUDA graph, where the path is captured.
TEST_F(OneRankPath, NanCheckAndANamedTransportKeepTheHostDrivenPath) {
  Options scanned;
  scanned.nanCheck = NanCheck::kError;
  std::unique_ptr<Communicator> c = makeOneRank(cuda::DeviceTransportKind::kAuto, scanned);
  ASSERT_TRUE(c);
  const cudaStream_t s = s_;
  std::vector<float> host = ramp(64, 0);
  host[17] = std::numeric_limits<float>::quiet_NaN();
  float* d = upload(host, &owned_);
  const Status st = c->allreduceAsync(d, d, host.size(), DataType::kFloat32, ReduceOp::kSum, s)->wait();
  EXPECT_FALSE(st.isOk()) << "a NaN went through the one-rank path unscanned";
  EXPECT_NE(st.message().find("NaN"), std::string::npos) << st.toString();

  std::unique_ptr<Communicator> staged = makeOneRank(cuda::DeviceTransportKind::kStaged);
  ASSERT_TRUE(staged);
  float* e = upload(ramp(64, 0), &owned_);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const Status captured = staged->allreduceAsync(e, e, 64, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  if (graph != nullptr) cudaGraphDestroy(graph);
  EXPECT_EQ(captured.code(), StatusCode::kInvalidArgument) << captured.toString();
  EXPECT_NE(captured.message().find("captured into a CUDA graph"), std::string::npos) << captured.toString();
}

// A call whose arguments fail the checks gets its own error and leaves the communicator usable, as the
// pipeline's refusal did: the next call works (the path's decline has no peer to tell).
TEST_F(OneRankPath, ARejectedCallLeavesTheCommunicatorUsable) {
  std::unique_ptr<Communicator> c = makeOneRank(cuda::DeviceTransportKind::kAuto);
  ASSERT_TRUE(c);
  const cudaStream_t s = s_;
  float* in = upload(ramp(100, 4), &owned_);
  float* out = upload(std::vector<float>(100, -1.f), &owned_);
  const Status bad = c->allreduceAsync(nullptr, out, 100, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.toString();
  const Status good = c->allreduceAsync(in, out, 100, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  EXPECT_TRUE(good.isOk()) << good.toString();
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(download(out, 100), ramp(100, 4));
}

}  // namespace
}  // namespace ringguard
