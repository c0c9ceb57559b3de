// The NCCL transport with world size 1: ncclSend/ncclRecv to itself through the full path of the
// verified ring (framing, device CRC, fused verify + apply, fault injection, retransmission with the
// original CRC). The transport is a leaf: its id comes from newUniqueId and its control channel is a
// one-rank loopback transport, no bootstrap needed.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/fault_injector.h"
#include "cuda/memory_pool.h"
#include "executor/device/device_executor.h"
#include "executor/executor.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/nccl/nccl_transport.h"

namespace ringguard {
namespace {

constexpr size_t kSlices = 16;
constexpr size_t kSliceElems = 10007;  // odd: unaligned slice starts

Status waitDone(FrameRequest* r) {
  for (int i = 0; i < 10000000; ++i) {
    bool done = false;
    RINGGUARD_RETURN_IF_ERROR(r->test(&done));
    if (done) return Status::ok();
  }
  return Status(StatusCode::kTimeout, "request did not complete");
}

// World size 1: a fresh id, and a loopback transport of one rank as the control channel.
Status createSelfNccl(cudaStream_t stream, int lanes, std::unique_ptr<Transport>* out) {
  std::vector<uint8_t> id;
  RINGGUARD_RETURN_IF_ERROR(NcclTransport::newUniqueId(&id));
  return NcclTransport::create(id, std::move(makeLoopbackTransports(1)[0]), stream,
                               std::chrono::milliseconds(20000), lanes, out);
}

Status syncExec(Executor* e) {
  for (;;) {
    bool done = false;
    RINGGUARD_RETURN_IF_ERROR(e->syncTest(&done));
    if (done) return Status::ok();
  }
}

TEST(NcclLoopback, FramedVerifiedSlicesWithInjectedFaultsAndRetransmission) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::unique_ptr<DevicePool> pool;
  ASSERT_TRUE(DevicePool::create(0, &pool).isOk());
  PinnedHostPool pinned;
  std::unique_ptr<Transport> t;
  // Three lanes: consecutive frames go round-robin over three communicators, and still match.
  Status st = createSelfNccl(stream, 3, &t);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(t->size(), 1);
  {
    DeviceExecutor exec(0, pool.get(), &pinned, stream);
    const size_t bytes = kSliceElems * sizeof(float), total = kSlices * bytes;
    std::vector<float> host(kSlices * kSliceElems);
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(int(i % 97) - 48);
    void *src = nullptr, *dst = nullptr;
    ASSERT_TRUE(pool->allocate(total, stream, &src).isOk());
    ASSERT_TRUE(pool->allocate(total, stream, &dst).isOk());
    ASSERT_EQ(cudaMemcpyAsync(src, host.data(), total, cudaMemcpyHostToDevice, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dst, 0, total, stream), cudaSuccess);
    ASSERT_TRUE(exec.prepare(2 * kSlices, int(kSlices), bytes).isOk());

    FaultOptions fo;
    fo.mode = FaultMode::kBitFlip;
    fo.schedule = {{0, 0, 3, 0}, {0, 0, 11, 0}};
    FaultInjector inj(fo);
    std::vector<FrameRequest> sends(kSlices), recvs(kSlices);
    auto srcAt = [&](size_t k) { return static_cast<uint8_t*>(src) + k * bytes; };
    auto dstAt = [&](size_t k) { return static_cast<uint8_t*>(dst) + k * bytes; };
    // Step 0: every slice to ourselves, received into its own slot, reduced (sum) into dst = src + src.
    auto roundTrip = [&](const std::vector<size_t>& slices, int attempt) {
      for (size_t k : slices) {
        SliceId id{0, 0, uint32_t(k), 0, uint32_t(bytes), uint16_t(attempt)};
        if (attempt == 0) {
          ASSERT_TRUE(exec.sealFirst(k, srcAt(k), id).isOk());
        } else {
          ASSERT_TRUE(exec.retag(k, uint16_t(attempt)).isOk());
        }
        ASSERT_TRUE(t->postRecv(0, exec.slot(int(k)), bytes, exec.slotTrailer(int(k)), &recvs[k]).isOk());
        ASSERT_TRUE(t->postSend(0, srcAt(k), bytes, exec.sendTrailer(k), &sends[k]).isOk());
      }
      ASSERT_TRUE(t->flush().isOk());
      for (size_t k : slices) {
        ASSERT_TRUE(waitDone(&recvs[k]).isOk());
        ASSERT_TRUE(waitDone(&sends[k]).isOk());
        // NCCL runs on a stream of its own: the executor's work on the slot waits for the group's event.
        ASSERT_NE(recvs[k].streamEvent(), nullptr);
        ASSERT_TRUE(exec.waitFor(recvs[k].streamEvent()).isOk());
        ASSERT_TRUE(exec.waitFor(sends[k].streamEvent()).isOk());
        // Fault injection as the algorithm does it: a plan, applied by a kernel on the executor's stream
        // after the transfer's event, with no host wait.
        if (inj.corrupts(0, 0, int(k), 0, attempt)) {
          const CorruptionPlan plan = inj.plan(0, 0, int(k), 0, attempt, bytes);
          EXPECT_TRUE(plan.damages());
          ASSERT_TRUE(exec.corruptReceived(int(k), nullptr, bytes, plan).isOk());
        }
        ApplyTask task;
        task.expected = SliceId{0, 0, uint32_t(k), 0, uint32_t(bytes), uint16_t(attempt)};
        task.next = SliceId{0, 1, uint32_t(k), 0, uint32_t(bytes), uint16_t(attempt)};
        task.dst = dstAt(k);
        task.local = srcAt(k);
        task.count = kSliceElems;
        task.dtype = DataType::kFloat32;
        task.op = ReduceOp::kSum;
        task.reduce = true;
        task.forwarded = true;
        task.nranks = 2;
        ASSERT_TRUE(exec.verifyAndApply(task, int(k), k, kSlices + k).isOk());
      }
      ASSERT_TRUE(syncExec(&exec).isOk());
    };
    std::vector<size_t> all;
    for (size_t k = 0; k < kSlices; ++k) all.push_back(k);
    roundTrip(all, 0);
    std::vector<size_t> failed;
    for (size_t k = 0; k < kSlices; ++k) {
      SliceCheck v = exec.verdict(k);
      if (k == 3 || k == 11) {
        EXPECT_EQ(v, SliceCheck::kCorrupt) << "slice " << k;
        failed.push_back(k);
      } else {
        EXPECT_EQ(v, SliceCheck::kOk) << "slice " << k;
      }
    }
    // The failed slices were never applied: their dst is still zero.
    std::vector<float> out(host.size());
    ASSERT_EQ(cudaMemcpyAsync(out.data(), dst, total, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t k : failed) EXPECT_EQ(out[k * kSliceElems + 5], 0.0f) << "unverified bytes were applied";
    // Repair: resend the retained bytes with their original CRC.
    roundTrip(failed, 1);
    for (size_t k : failed) EXPECT_EQ(exec.verdict(k), SliceCheck::kOk);
    ASSERT_EQ(cudaMemcpyAsync(out.data(), dst, total, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(out[i], 2 * host[i]) << "element " << i;
    // The forwarded trailers carry the CRC of what was written (a poisoned flag would mark a failure).
    std::vector<Trailer> fwd(kSlices);
    ASSERT_EQ(cudaMemcpyAsync(fwd.data(), exec.sendTrailer(kSlices), kSlices * sizeof(Trailer),
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t k = 0; k < kSlices; ++k) {
      SliceId next{0, 1, uint32_t(k), 0, uint32_t(bytes), uint16_t(k == 3 || k == 11 ? 1 : 0)};
      EXPECT_EQ(checkTrailer(fwd[k], next), SliceCheck::kOk) << "slice " << k;
      EXPECT_EQ(fwd[k].flags, 0) << "slice " << k;
    }
    ASSERT_TRUE(pool->free(src, stream).isOk());
    ASSERT_TRUE(pool->free(dst, stream).isOk());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  t.reset();
  cudaStreamDestroy(stream);
}

TEST(NcclLoopback, LaneCountOutOfRangeIsRefused) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (int lanes : {0, NcclTransport::kMaxLanes + 1}) {
    std::unique_ptr<Transport> t;
    Status st = createSelfNccl(nullptr, lanes, &t);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find("lanes"), std::string::npos) << st.message();
    EXPECT_EQ(t, nullptr);
  }
}

}  // namespace
}  // namespace ringguard
