// The guard's device backend (src/cuda/guard_scan*.cu/.cc) against the host backend, and the Guard's state
// machine over device memory: replay bit-identical to a fault-free run, deferred steps with one host wait
// per step, mixed host and device buffers. Skipped without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda/memory_pool.h"
#include "cuda/snapshot.h"
#include "gpu_test_util.h"
#include "ringguard/guard/device_backend.h"
#include "ringguard/guard/guard.h"

namespace ringguard {
namespace {

class GuardDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASSERT_STATUS_OK(DevicePool::create(0, &pool_));
  }
  void TearDown() override {
    for (void* p : allocations_) (void)pool_->free(p, stream_);
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    const Status s = pool_->allocate(bytes, stream_, &p);
    EXPECT_TRUE(s.isOk()) << s.toString();
    allocations_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) {
    ASSERT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
  }
  std::vector<unsigned char> download(const void* src, size_t bytes) {
    std::vector<unsigned char> out(bytes);
    EXPECT_EQ(cudaSuccess, cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyDeviceToHost, stream_));
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream_));
    return out;
  }
  std::unique_ptr<GuardBackend> deviceBackend(bool batchSnapshots = true) {
    std::unique_ptr<GuardBackend> b;
    DeviceGuardBackendOptions o;
    o.pool = pool_.get();
    o.batchSnapshots = batchSnapshots;
    const Status s = makeDeviceGuardBackend(o, &b);
    EXPECT_TRUE(s.isOk()) << s.toString();
    return b;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DevicePool> pool_;
  std::vector<void*> allocations_;
};

TEST_F(GuardDevice, SnapshotAndRestoreAreBitExactAndDoNotWait) {
  auto backend = deviceBackend();
  const size_t bytes = (size_t(1) << 20) + 12;
  std::vector<unsigned char> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 131 + 7);
  void* d = alloc(bytes);
  upload(d, host.data(), bytes);
  GuardBuffer b{"w", d, bytes, DataType::kUint8, MemoryKind::kDevice};
  SnapshotHandle h;
  ASSERT_STATUS_OK(backend->snapshot(b, stream_, &h));
  ASSERT_CUDA(cudaMemsetAsync(d, 0xab, bytes, stream_));  // the "op", ordered after the snapshot
  ASSERT_STATUS_OK(backend->restore(b, h, stream_));
  ASSERT_STATUS_OK(backend->release(h, stream_));
  EXPECT_EQ(0u, backend->hostWaits()) << "snapshot, restore and release never wait on the host";
  EXPECT_EQ(host, download(d, bytes));
}

// The device backend finds, sanitizes and injects exactly what the host backend does, for every dtype.
TEST_F(GuardDevice, ScanSanitizeAndInjectMatchTheHostBackend) {
  auto dev = deviceBackend();
  auto host = makeHostGuardBackend();
  const DataType types[] = {DataType::kFloat32,  DataType::kFloat64,    DataType::kFloat16,
                            DataType::kBFloat16, DataType::kFloat8E5M2, DataType::kFloat8E4M3};
  for (DataType t : types) {
    SCOPED_TRACE(dataTypeName(t));
    const size_t width = dataTypeSize(t);
    for (size_t n : {size_t(1), size_t(17), size_t(4099), size_t(1) << 18}) {
      std::vector<unsigned char> mem(n * width, 0x11);  // finite in every dtype
      GuardBuffer hb{"h", mem.data(), mem.size(), t, MemoryKind::kHost};
      void* d = alloc(mem.size());
      GuardBuffer db{"d", d, mem.size(), t, MemoryKind::kDevice};
      upload(d, mem.data(), mem.size());
      const size_t idx[] = {n - 1, n / 2, n / 3, 0};
      const FaultValue vals[] = {FaultValue::kNaN, FaultValue::kPosInf, FaultValue::kNegInf,
                                 FaultValue::kLargeFinite};
      for (int k = 0; k < 4; ++k) {
        ASSERT_STATUS_OK(host->inject(hb, idx[k], vals[k], nullptr));
        ASSERT_STATUS_OK(dev->inject(db, idx[k], vals[k], stream_));
      }
      EXPECT_EQ(mem, download(d, mem.size()));
      std::vector<ScanResult> hr, dr;
      ASSERT_STATUS_OK(host->scan(hb, nullptr));
      ASSERT_STATUS_OK(host->readScans(nullptr, &hr));
      ASSERT_STATUS_OK(dev->scan(db, stream_));
      ASSERT_STATUS_OK(dev->readScans(stream_, &dr));
      ASSERT_EQ(1u, dr.size());
      EXPECT_EQ(hr[0].count, dr[0].count) << n;
      EXPECT_EQ(hr[0].firstIndex, dr[0].firstIndex) << n;
      for (bool clamp : {false, true}) {
        std::vector<unsigned char> copy = mem;
        GuardBuffer cb{"c", copy.data(), copy.size(), t, MemoryKind::kHost};
        upload(d, mem.data(), mem.size());
        const SanitizeMode mode = clamp ? SanitizeMode::kClamp : SanitizeMode::kZero;
        ASSERT_STATUS_OK(host->sanitize(cb, mode, nullptr));
        ASSERT_STATUS_OK(dev->sanitize(db, mode, stream_));
        EXPECT_EQ(copy, download(d, mem.size())) << "clamp " << clamp << " n " << n;
      }
    }
  }
}

TEST_F(GuardDevice, ABatchOfMoreScansThanOneChunkNamesTheRightBuffer) {
  auto dev = deviceBackend();
  const size_t scans = 5000;
  float* d = static_cast<float*>(alloc(scans * sizeof(float)));
  std::vector<float> zeros(scans, 0.0f);
  upload(d, zeros.data(), zeros.size() * sizeof(float));
  ASSERT_STATUS_OK(guardInjectDevice(d + 4500, 0, DataType::kFloat32, InjectedValue::kPosInf,
                                     stream_));  // scan 4500 is bad
  for (size_t i = 0; i < scans; ++i) {
    GuardBuffer b{"t", d + i, sizeof(float), DataType::kFloat32, MemoryKind::kDevice};
    ASSERT_STATUS_OK(dev->scan(b, stream_));
  }
  std::vector<ScanResult> r;
  ASSERT_STATUS_OK(dev->readScans(stream_, &r));
  ASSERT_EQ(scans, r.size());
  for (size_t i = 0; i < scans; ++i) EXPECT_EQ(i == 4500 ? 1u : 0u, r[i].count) << i;
}

// A device "op": y = w (output), then w = x (state). A replayed call must reproduce the fault-free result.
struct DeviceCopyOp {
  float* x;
  float* w;
  float* y;
  size_t n;
  cudaStream_t stream;
  GuardedOp op(const char* name = "copy") {
    GuardedOp o;
    o.name = name;
    o.inputs = {GuardBuffer{"x", x, n * 4, DataType::kFloat32, MemoryKind::kDevice}};
    o.state = {GuardBuffer{"w", w, n * 4, DataType::kFloat32, MemoryKind::kDevice}};
    o.outputs = {GuardBuffer{"y", y, n * 4, DataType::kFloat32, MemoryKind::kDevice}};
    o.stream = stream;
    o.body = [this] {
      if (cudaMemcpyAsync(y, w, n * 4, cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
          cudaMemcpyAsync(w, x, n * 4, cudaMemcpyDeviceToDevice, stream) != cudaSuccess) {
        return Status(StatusCode::kInternal, "copy op failed");
      }
      return Status::ok();
    };
    return o;
  }
};

// Many small state tensors (sizes 0 .. 4 KiB + odd bytes): snapshotted as one batch (cudaMemcpyBatchAsync),
// the op overwrites every one, a NaN forces a replay, and every tensor must be restored bit for bit before
// it: the results equal those of the per-buffer path and of the fault-free run.
TEST_F(GuardDevice, ABatchedSnapshotOfManyTensorsRestoresEachExactly) {
  constexpr int kTensors = 96;
  auto run = [&](bool batched, bool fault, GuardCounters* counters) {
    std::vector<void*> state;
    std::vector<size_t> bytes;
    for (int t = 0; t < kTensors; ++t) {
      const size_t b = t % 7 == 0 ? 0 : size_t(4 * (t * 37 % 1024) + 4);
      std::vector<unsigned char> init(b);
      for (size_t i = 0; i < b; ++i) init[i] = static_cast<unsigned char>(i * 7 + t);
      void* d = alloc(b + 4);
      if (b != 0) upload(d, init.data(), b);
      state.push_back(d);
      bytes.push_back(b);
    }
    float* y = static_cast<float*>(alloc(64 * 4));
    GuardedOp o;
    o.name = "many";
    for (int t = 0; t < kTensors; ++t) {
      o.state.push_back(GuardBuffer{"s" + std::to_string(t), state[size_t(t)], bytes[size_t(t)],
                                    DataType::kUint8, MemoryKind::kDevice});
    }
    o.outputs = {GuardBuffer{"y", y, 64 * 4, DataType::kFloat32, MemoryKind::kDevice}};
    o.stream = stream_;
    int runs = 0;
    o.body = [&] {
      // Every state tensor becomes a function of what it held (its first byte) and of the run: a replay that
      // started from anything but the snapshot would differ.
      for (int t = 0; t < kTensors; ++t) {
        if (bytes[size_t(t)] == 0) continue;
        if (cudaMemsetAsync(state[size_t(t)], 0x40 + t, bytes[size_t(t)] / 2, stream_) != cudaSuccess)
          return Status(StatusCode::kInternal, "memset");
      }
      ++runs;
      return cudaMemsetAsync(y, 0, 64 * 4, stream_) == cudaSuccess ? Status::ok()
                                                                   : Status(StatusCode::kInternal, "memset");
    };
    Guard g(GuardPolicy{}, makeHostGuardBackend(), deviceBackend(batched));
    if (fault) {
      GuardFaultRule r;
      r.op = "many";
      r.call = 0;
      r.attempts = 1;
      r.element = 9;
      EXPECT_TRUE(g.faults().addRule(r).isOk());
    }
    const Status st = g.run(o);
    EXPECT_TRUE(st.isOk()) << st.toString();
    EXPECT_EQ(fault ? 2 : 1, runs);
    *counters = g.counters();
    std::vector<unsigned char> all;
    for (int t = 0; t < kTensors; ++t) {
      std::vector<unsigned char> d = download(state[size_t(t)], bytes[size_t(t)]);
      all.insert(all.end(), d.begin(), d.end());
    }
    return all;
  };
  GuardCounters clean, batched, single;
  const auto ref = run(true, false, &clean);
  EXPECT_EQ(ref, run(true, true, &batched));
  EXPECT_EQ(ref, run(false, true, &single));
  EXPECT_EQ(1u, batched.replays);
  EXPECT_EQ(batched.bytesSnapshotted, single.bytesSnapshotted);
  EXPECT_EQ(batched.bytesSnapshotted, clean.bytesSnapshotted);
}

TEST_F(GuardDevice, ImmediateReplayOverDeviceMemoryIsBitIdentical) {
  const size_t n = 100003;
  DeviceCopyOp op{static_cast<float*>(alloc(n * 4)), static_cast<float*>(alloc(n * 4)),
                  static_cast<float*>(alloc(n * 4)), n, stream_};
  auto run = [&](bool faults, GuardCounters* counters) {
    std::vector<float> w0(n, 1.0f);
    upload(op.w, w0.data(), n * 4);
    Guard g(GuardPolicy{}, makeHostGuardBackend(), deviceBackend());
    if (faults) {
      GuardFaultRule r;
      r.op = "copy";
      r.call = 2;
      r.attempts = 2;  // the first run and the first replay
      r.element = 777;
      EXPECT_TRUE(g.faults().addRule(r).isOk());
    }
    for (int s = 0; s < 5; ++s) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((s * 7 + i) % 1000);
      upload(op.x, x.data(), n * 4);
      GuardedOp o = op.op();
      const Status st = g.run(o);
      EXPECT_TRUE(st.isOk()) << st.toString();
    }
    *counters = g.counters();
    std::vector<unsigned char> out = download(op.w, n * 4);
    std::vector<unsigned char> y = download(op.y, n * 4);
    out.insert(out.end(), y.begin(), y.end());
    return out;
  };
  GuardCounters clean, faulty;
  const auto ref = run(false, &clean);
  EXPECT_EQ(ref, run(true, &faulty));
  EXPECT_EQ(2u, faulty.detections);
  EXPECT_EQ(2u, faulty.replays);
  EXPECT_EQ(5u, clean.hostWaits) << "immediate: one host wait per guarded call";
}

TEST_F(GuardDevice, DeferredStepHasNoHostWaitInsideTheStepAndReplaysIt) {
  const size_t n = 4097;
  DeviceCopyOp a{static_cast<float*>(alloc(n * 4)), static_cast<float*>(alloc(n * 4)),
                 static_cast<float*>(alloc(n * 4)), n, stream_};
  std::vector<float> w0(n, 3.0f), x(n, 5.0f);
  upload(a.w, w0.data(), n * 4);
  upload(a.x, x.data(), n * 4);
  GuardPolicy p;
  p.mode = VerdictMode::kDeferred;
  Guard g(p, makeHostGuardBackend(), deviceBackend());
  GuardFaultRule r;
  r.op = "copy";
  r.call = 1;
  r.value = FaultValue::kNegInf;
  EXPECT_TRUE(g.faults().addRule(r).isOk());
  uint64_t waitsInside = 0;
  StepReport report;
  const Status st = g.runStep(
      [&] {
        const uint64_t before = g.counters().hostWaits;
        for (int k = 0; k < 3; ++k) {
          GuardedOp o = a.op();
          RINGGUARD_RETURN_IF_ERROR(g.run(o));
        }
        waitsInside += g.counters().hostWaits - before;
        return Status::ok();
      },
      &report);
  ASSERT_STATUS_OK(st);
  EXPECT_EQ(0u, waitsInside) << "deferred mode: no host wait inside the step";
  EXPECT_EQ(GuardResolution::kReplayed, report.resolution);
  EXPECT_EQ(2, report.attempts);
  // The only waits: one verdict per step attempt, plus the rare-path copy of the slots and the element read
  // after the detection.
  EXPECT_EQ(4u, g.counters().hostWaits);
  // Three copies of x into w: w == x, y == x (the replay started from the restored w0).
  std::vector<unsigned char> xs(reinterpret_cast<unsigned char*>(x.data()),
                                reinterpret_cast<unsigned char*>(x.data()) + n * 4);
  EXPECT_EQ(xs, download(a.w, n * 4));
  EXPECT_EQ(xs, download(a.y, n * 4));
}

TEST_F(GuardDevice, StepToFlagWritesTheVerdictOnTheDeviceWithoutAnyHostWait) {
  const size_t n = 4097;
  DeviceCopyOp a{static_cast<float*>(alloc(n * 4)), static_cast<float*>(alloc(n * 4)),
                 static_cast<float*>(alloc(n * 4)), n, stream_};
  std::vector<float> ones(n, 1.0f);
  upload(a.w, ones.data(), n * 4);
  upload(a.x, ones.data(), n * 4);
  float* flag = static_cast<float*>(alloc(sizeof(float)));
  GuardPolicy p;
  p.mode = VerdictMode::kDeferred;
  Guard g(p, makeHostGuardBackend(), deviceBackend());
  GuardFaultRule r;
  r.op = "copy";
  r.call = 4;  // step 2, its first of two calls
  EXPECT_TRUE(g.faults().addRule(r).isOk());
  std::vector<float> flags;
  for (int s = 0; s < 4; ++s) {
    ASSERT_STATUS_OK(g.runStepToFlag(
        [&] {
          for (int k = 0; k < 2; ++k) {
            GuardedOp o = a.op();
            RINGGUARD_RETURN_IF_ERROR(g.run(o));
          }
          return Status::ok();
        },
        GuardBuffer{"flag", flag, sizeof(float), DataType::kFloat32, MemoryKind::kDevice}, stream_));
    EXPECT_EQ(0u, g.counters().hostWaits) << "step " << s;
    float v = -1;
    std::memcpy(&v, download(flag, sizeof(float)).data(), sizeof(float));
    flags.push_back(v);
  }
  EXPECT_EQ((std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f}), flags);
  EXPECT_EQ(0u, g.counters().bytesSnapshotted);
}

TEST_F(GuardDevice, MixedHostAndDeviceBuffersInOneOp) {
  const size_t n = 33;
  float* d = static_cast<float*>(alloc(n * 4));
  std::vector<float> hostState(n, 2.0f);
  Guard g(GuardPolicy{}, makeHostGuardBackend(), deviceBackend());
  GuardFaultRule r;
  r.op = "mixed";
  r.call = 0;
  r.output = -1;
  EXPECT_TRUE(g.faults().addRule(r).isOk());
  GuardedOp o;
  o.name = "mixed";
  o.state = {GuardBuffer{"h", hostState.data(), n * 4, DataType::kFloat32, MemoryKind::kHost}};
  o.outputs = {GuardBuffer{"d", d, n * 4, DataType::kFloat32, MemoryKind::kDevice}};
  o.stream = stream_;
  o.body = [&] {
    for (float& v : hostState) v += 1.0f;
    return cudaMemcpyAsync(d, hostState.data(), n * 4, cudaMemcpyHostToDevice, stream_) == cudaSuccess
               ? Status::ok()
               : Status(StatusCode::kInternal, "copy failed");
  };
  CallReport rep;
  ASSERT_STATUS_OK(g.run(o, &rep));
  EXPECT_EQ(GuardResolution::kReplayed, rep.resolution);
  EXPECT_EQ(std::vector<float>(n, 3.0f), hostState) << "the host state was restored before the replay";
  std::vector<unsigned char> expect(n * 4);
  std::memcpy(expect.data(), hostState.data(), n * 4);
  EXPECT_EQ(expect, download(d, n * 4));
}

}  // namespace
}  // namespace ringguard

namespace ringguard {
namespace {

// Argument checks that fail before any CUDA call: these run (and must pass) without a GPU.
TEST(NoGpuGuardLaunchers, RejectBadArguments) {
  EXPECT_EQ(StatusCode::kInvalidArgument,
            guardSanitizeDevice(reinterpret_cast<void*>(16), 4, DataType::kInt32, false, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            guardSanitizeDevice(nullptr, 4, DataType::kFloat32, true, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            guardInjectDevice(nullptr, 0, DataType::kFloat16, InjectedValue::kNaN, nullptr).code());
  EXPECT_EQ("guardInjectDevice: unsupported dtype i64 (f32, f64, f16, bf16 and the float8 types only)",
            guardInjectDevice(reinterpret_cast<void*>(16), 0, DataType::kInt64, InjectedValue::kNaN, nullptr)
                .message());
  EXPECT_EQ(StatusCode::kInvalidArgument, guardVerdictDevice(nullptr, 0, 0, false, nullptr, nullptr).code());
  GuardVerdict v;
  EXPECT_EQ(StatusCode::kInvalidArgument, guardVerdictDevice(nullptr, 3, 0, false, &v, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, guardVerdictFlagDevice(&v, nullptr, nullptr).code());
}

}  // namespace
}  // namespace ringguard
