// GraphGuard: detect -> restore -> replay inside one CUDA graph (a WHILE conditional node), checked bit for
// bit against the op run plainly, with the graph's own fault injection. NoGpu*: the argument checks, which
// run before any CUDA call (CI).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu_test_util.h"
#include "graph_guard_op.h"
#include "ringguard/guard/graph_guard.h"

namespace ringguard {
namespace {

constexpr int kN = 1000;

GuardBuffer deviceBuffer(const char* name, void* data, size_t bytes, DataType dt = DataType::kFloat32) {
  return GuardBuffer{name, data, bytes, dt, MemoryKind::kDevice};
}

// y = max(0, 2x + acc), acc += 1, on the host (the kernel's exact arithmetic: one rounding per operation).
void reference(const std::vector<float>& x, std::vector<float>* acc, std::vector<float>* y) {
  for (int i = 0; i < kN; ++i) {
    const float v = 2.0f * x[i] + (*acc)[i];
    (*y)[i] = v > 0.0f ? v : 0.0f;
    (*acc)[i] = (*acc)[i] + 1.0f;
  }
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class GraphGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&x_), kN * sizeof(float)));
    ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&acc_), kN * sizeof(float)));
    ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&y_), kN * sizeof(float)));
    x0_.resize(kN);
    acc0_.resize(kN);
    for (int i = 0; i < kN; ++i) {
      x0_[i] = float(i % 37 - 18) / 8;  // exact in f32, every sum below too
      acc0_[i] = float(i % 11 - 5) / 4;
    }
    ASSERT_CUDA(cudaMemcpy(x_, x0_.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(acc_, acc0_.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemset(y_, 0, kN * sizeof(float)));
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    (void)cudaFree(x_);
    (void)cudaFree(acc_);
    (void)cudaFree(y_);
  }

  GraphGuardedOp op() {
    GraphGuardedOp o;
    o.name = "relu_axpy";
    o.state = {deviceBuffer("acc", acc_, kN * sizeof(float))};
    o.outputs = {deviceBuffer("y", y_, kN * sizeof(float))};
    float* y = y_;
    float* acc = acc_;
    const float* x = x_;
    o.body = [y, acc, x](void* s) {
      launchReluAxpy(y, acc, x, kN, s);
      return Status::ok();
    };
    return o;
  }

  void readBack(std::vector<float>* acc, std::vector<float>* y) {
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    acc->resize(kN);
    y->resize(kN);
    ASSERT_CUDA(cudaMemcpy(acc->data(), acc_, kN * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_CUDA(cudaMemcpy(y->data(), y_, kN * sizeof(float), cudaMemcpyDeviceToHost));
  }

  // The expected state and output after `calls` clean calls.
  void expected(int calls, std::vector<float>* acc, std::vector<float>* y) {
    *acc = acc0_;
    y->assign(kN, 0.0f);
    for (int c = 0; c < calls; ++c) reference(x0_, acc, y);
  }

  cudaStream_t stream_ = nullptr;
  float* x_ = nullptr;
  float* acc_ = nullptr;
  float* y_ = nullptr;
  std::vector<float> x0_, acc0_;
};

TEST_F(GraphGuardTest, CleanLaunchesEqualTheOpAndReplayNothing) {
  std::unique_ptr<GraphGuard> g;
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), GraphGuardOptions{}, &g));
  for (int i = 0; i < 3; ++i) ASSERT_STATUS_OK(g->launch(stream_));
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_EQ(r.replays, 0u);
  EXPECT_TRUE(r.clean);
  EXPECT_EQ(r.launches, 3u);
  std::vector<float> acc, y, wantAcc, wantY;
  readBack(&acc, &y);
  expected(3, &wantAcc, &wantY);
  EXPECT_TRUE(sameBits(acc, wantAcc));
  EXPECT_TRUE(sameBits(y, wantY));
}

TEST_F(GraphGuardTest, ATransientNanIsRolledBackAndReplayedOnTheDeviceBitIdentically) {
  GraphGuardOptions o;
  o.faults = {GraphFault{0, 5, FaultValue::kNaN, 0x1}};  // the first run of every launch
  std::unique_ptr<GraphGuard> g;
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), o, &g));
  ASSERT_STATUS_OK(g->launch(stream_));
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_EQ(r.replays, 1u);
  EXPECT_TRUE(r.clean);
  std::vector<float> acc, y, wantAcc, wantY;
  readBack(&acc, &y);
  expected(1, &wantAcc, &wantY);
  EXPECT_TRUE(sameBits(acc, wantAcc))
      << "acc was not restored before the replay (acc[0] " << acc[0] << ", want " << wantAcc[0] << ")";
  EXPECT_TRUE(sameBits(y, wantY));

  // A fault in the first run and the first replay (+Inf): two replays, still exact.
  o.faults = {GraphFault{0, kN - 1, FaultValue::kPosInf, 0x3}};
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), o, &g));
  ASSERT_STATUS_OK(g->launch(stream_));
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_EQ(r.replays, 2u);
  EXPECT_TRUE(r.clean);
  readBack(&acc, &y);
  expected(2, &wantAcc, &wantY);
  EXPECT_TRUE(sameBits(acc, wantAcc));
  EXPECT_TRUE(sameBits(y, wantY));
}

TEST_F(GraphGuardTest, APersistentFaultStopsAfterMaxReplaysAndRestoreRollsTheStateBack) {
  GraphGuardOptions o;
  o.maxReplays = 3;
  o.faults = {GraphFault{0, 7, FaultValue::kNegInf, ~0u}};
  std::unique_ptr<GraphGuard> g;
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), o, &g));
  ASSERT_STATUS_OK(g->launch(stream_));
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_EQ(r.replays, 3u);
  EXPECT_FALSE(r.clean);
  EXPECT_EQ(r.firstBadOutput, 0u);
  EXPECT_EQ(r.badElements, 1u);
  std::vector<float> acc, y, wantAcc, wantY;
  readBack(&acc, &y);
  expected(1, &wantAcc, &wantY);  // the last attempt ran from the restored state once
  EXPECT_TRUE(sameBits(acc, wantAcc));
  EXPECT_TRUE(std::isinf(y[7]) && y[7] < 0);
  ASSERT_STATUS_OK(g->restore(stream_));  // the host's escalation: roll back, then skip or raise
  readBack(&acc, &y);
  EXPECT_TRUE(sameBits(acc, acc0_));
}

TEST_F(GraphGuardTest, EveryLaunchSnapshotsAfreshAndReplaysWithoutTheHost) {
  GraphGuardOptions o;
  o.faults = {GraphFault{0, 3, FaultValue::kNaN, 0x1}};
  std::unique_ptr<GraphGuard> g;
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), o, &g));
  constexpr int kLaunches = 50;
  for (int i = 0; i < kLaunches; ++i) ASSERT_STATUS_OK(g->launch(stream_));  // no report in between
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_EQ(r.launches, uint64_t(kLaunches));
  EXPECT_EQ(r.replays, 1u);
  EXPECT_TRUE(r.clean);
  std::vector<float> acc, y, wantAcc, wantY;
  readBack(&acc, &y);
  expected(kLaunches, &wantAcc, &wantY);
  EXPECT_TRUE(sameBits(acc, wantAcc));
  EXPECT_TRUE(sameBits(y, wantY));
}

// Launches alternate between two streams with no host wait, and a persistent fault's restore() runs on the
// second: each launch must wait for the one before (the graph has one set of snapshots), so the state is
// the plain op applied launch after launch; without the wait the launches race on `acc` and the snapshots.
TEST_F(GraphGuardTest, LaunchesAndRestoreOnAnotherStreamWaitForTheLastLaunch) {
  cudaStream_t other = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  std::unique_ptr<GraphGuard> g;
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), GraphGuardOptions{}, &g));
  constexpr int kLaunches = 40;
  for (int i = 0; i < kLaunches; ++i) ASSERT_STATUS_OK(g->launch(i % 2 == 0 ? stream_ : other));
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_TRUE(r.clean);
  EXPECT_EQ(r.launches, uint64_t(kLaunches));
  ASSERT_CUDA(cudaStreamSynchronize(other));
  std::vector<float> acc, y, wantAcc, wantY;
  readBack(&acc, &y);
  expected(kLaunches, &wantAcc, &wantY);
  EXPECT_TRUE(sameBits(acc, wantAcc));
  EXPECT_TRUE(sameBits(y, wantY));

  // A persistent fault, launched on `other`; restore() enqueued on stream_ rolls the state back to what it
  // was before that launch (kLaunches clean calls), not to a snapshot the launch has not taken yet.
  GraphGuardOptions o;
  o.maxReplays = 1;
  o.faults = {GraphFault{0, 5, FaultValue::kPosInf, ~0u}};
  std::unique_ptr<GraphGuard> bad;
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), o, &bad));
  ASSERT_STATUS_OK(bad->launch(other));
  ASSERT_STATUS_OK(bad->restore(stream_));
  ASSERT_STATUS_OK(bad->report(&r));
  EXPECT_FALSE(r.clean);
  ASSERT_CUDA(cudaStreamSynchronize(other));
  readBack(&acc, &y);
  EXPECT_TRUE(sameBits(acc, wantAcc));
  bad.reset();
  ASSERT_CUDA(cudaStreamDestroy(other));
}

TEST_F(GraphGuardTest, TheFirstBadOutputIsNamedAmongSeveral) {
  void* second = nullptr;
  ASSERT_CUDA(cudaMalloc(&second, 64 * sizeof(uint16_t)));
  ASSERT_CUDA(cudaMemset(second, 0, 64 * sizeof(uint16_t)));
  GraphGuardedOp o = op();
  o.outputs.push_back(deviceBuffer("h", second, 64 * sizeof(uint16_t), DataType::kBFloat16));
  GraphGuardOptions opts;
  opts.maxReplays = 1;
  opts.faults = {GraphFault{1, 63, FaultValue::kNaN, ~0u}};
  std::unique_ptr<GraphGuard> g;
  ASSERT_STATUS_OK(GraphGuard::create(0, o, opts, &g));
  ASSERT_STATUS_OK(g->launch(stream_));
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_FALSE(r.clean);
  EXPECT_EQ(r.replays, 1u);
  EXPECT_EQ(r.firstBadOutput, 1u);
  EXPECT_EQ(r.badElements, 1u);
  g.reset();
  ASSERT_CUDA(cudaFree(second));
}

TEST_F(GraphGuardTest, ABodyThatCannotBeCapturedIsRefusedNamingTheOp) {
  GraphGuardedOp o = op();
  o.name = "syncs";
  o.body = [](void* s) {
    const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(s));  // illegal while capturing
    return e == cudaSuccess ? Status::ok() : Status(StatusCode::kInternal, cudaGetErrorString(e));
  };
  std::unique_ptr<GraphGuard> g;
  const Status st = GraphGuard::create(0, o, GraphGuardOptions{}, &g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("GraphGuard 'syncs': not capturable"), std::string::npos) << st.toString();
  // The stream and the device are still usable: a plain graph guard works after it.
  ASSERT_STATUS_OK(GraphGuard::create(0, op(), GraphGuardOptions{}, &g));
  ASSERT_STATUS_OK(g->launch(stream_));
  GraphGuardReport r;
  ASSERT_STATUS_OK(g->report(&r));
  EXPECT_TRUE(r.clean);
}

// Checked before any CUDA call: these run on CI.
TEST(NoGpuGraphGuard, RejectsBadOpsNamingWhatIsWrong) {
  float fake[4] = {};
  GraphGuardedOp o;
  o.name = "op";
  o.body = [](void*) { return Status::ok(); };
  o.outputs = {GuardBuffer{"y", fake, sizeof(fake), DataType::kFloat32, MemoryKind::kHost}};
  std::unique_ptr<GraphGuard> g;
  auto expectError = [&](const GraphGuardOptions& opts, const std::string& text) {
    const Status st = GraphGuard::create(0, o, opts, &g);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.toString();
  };
  expectError({}, "GraphGuard 'op': output 'y' is not device memory");
  o.outputs = {GuardBuffer{"n", fake, sizeof(fake), DataType::kInt32, MemoryKind::kDevice}};
  expectError({}, "output 'n' has dtype i32, which holds no NaN or Inf");
  o.outputs = {GuardBuffer{"y", fake, 6, DataType::kFloat32, MemoryKind::kDevice}};
  expectError({}, "output 'y': 6 bytes is not a whole number of f32 elements");
  o.outputs = {GuardBuffer{"y", fake, sizeof(fake), DataType::kFloat32, MemoryKind::kDevice}};
  GraphGuardOptions opts;
  opts.maxReplays = 32;
  expectError(opts, "maxReplays 32 is outside 0 .. 31");
  opts.maxReplays = 1;
  opts.faults = {GraphFault{1, 0, FaultValue::kNaN, 1}};
  expectError(opts, "fault 0 names output 1 of 1");
  opts.faults = {GraphFault{0, 4, FaultValue::kNaN, 1}};
  expectError(opts, "fault 0 names element 4 of output 'y' (4 elements)");
  o.body = nullptr;
  expectError({}, "GraphGuard 'op': no body");
}

}  // namespace
}  // namespace ringguard
