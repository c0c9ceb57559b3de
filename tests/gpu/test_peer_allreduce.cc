// The one-shot verified allreduce over peer windows (src/transport/peer, src/cuda/peer_allreduce.cu), under
// mpirun with every rank on the one GPU (run under MPS: time-sliced ranks spin 4.5 ms per round trip). Sums
// of integer-valued floats, so every order gives the same bits; results checked exactly on every rank, with
// and without injected faults (detected == injected), inside a CUDA graph, and the failures: a fingerprint
// mismatch, a stopped peer (timeout naming it) and an abort while a kernel spins.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/mpi_bootstrap.h"
#include "core/float16.h"
#include "core/reduce.h"
#include "cuda/peer/peer_collectives.h"
#include "peer_test_util.h"
#include "ringguard/core/crc32.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/device_factory.h"
#include "transport/peer/peer_window.h"

namespace ringguard {
namespace peer {
namespace {

// An input and an output buffer of `count` floats on the device, freed at scope exit.
struct DeviceBuffers {
  explicit DeviceBuffers(size_t count) {
    EXPECT_EQ(cudaMalloc(&in, count * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&out, count * 4), cudaSuccess);
  }
  ~DeviceBuffers() {
    cudaFree(in);
    cudaFree(out);
  }
  float* in = nullptr;
  float* out = nullptr;
};

// The windows and stream of PeerWindowTest (peer_test_util.h), with the one-shot's arguments.
class PeerAllreduce : public PeerWindowTest {
 protected:
  PeerAllreduceArgs args(const void* send, void* recv, size_t count) const {
    PeerAllreduceArgs a;
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.rank = windows_->rank();
    a.size = windows_->size();
    for (int r = 0; r < a.size; ++r) a.windows[r] = windows_->window(r);
    a.layout = windows_->layout();
    a.record = windows_->errorRecordDevice();
    a.oneDevice = windows_->oneDevice();
    a.fingerprint[0] = 0;  // allreduce
    a.fingerprint[3] = uint32_t(count);
    a.fingerprint[4] = uint32_t(uint64_t(count) >> 32);
    a.timeoutNs = 20ull * 1000 * 1000 * 1000;
    return a;
  }

  // rank r's element i: (r + 1) * (i % 251 + 1) - 126, an integer; the sum over ranks is exact.
  static std::vector<float> input(int rank, size_t count) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = float((rank + 1) * int(i % 251 + 1) - 126);
    return v;
  }
  static std::vector<float> expected(int size, size_t count) {
    std::vector<float> v(count, 0.f);
    for (int r = 0; r < size; ++r) {
      const std::vector<float> in = input(r, count);
      for (size_t i = 0; i < count; ++i) v[i] += in[i];
    }
    return v;
  }

  // One allreduce of `count` elements, `offset` bytes into the buffers (16-byte alignment or not).
  void runExact(size_t count, size_t offset, bool inPlace, double faultProb = 0) {
    const size_t bytes = count * 4;
    char *dIn = nullptr, *dOut = nullptr;
    ASSERT_EQ(cudaMalloc(&dIn, bytes + 64), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dOut, bytes + 64), cudaSuccess);
    const std::vector<float> in = input(windows_->rank(), count);
    ASSERT_EQ(upload(dIn + offset, in.data(), bytes), cudaSuccess);
    ASSERT_EQ(fill(dOut, 0xff, bytes + 64), cudaSuccess);  // poisoned: every element must be written
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    void* out = inPlace ? dIn + offset : dOut + offset;
    PeerAllreduceArgs a = args(dIn + offset, out, count);
    a.fault.probability = faultProb;
    a.fault.seed = 7 + uint32_t(windows_->rank());
    Status st = launchPeerAllreduce(a, stream_);
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ErrorRecord* rec = windows_->errorRecord();
    ASSERT_EQ(rec->code, 0u) << "peer " << rec->peer << " chunk " << rec->chunk;
    std::vector<float> got(count);
    ASSERT_EQ(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::vector<float> want = expected(windows_->size(), count);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "count " << count << " offset " << offset;
    cudaFree(dIn);
    cudaFree(dOut);
  }
};

TEST_F(PeerAllreduce, ChunkCrcIsTheHostCrc) {
  std::vector<uint8_t> host(64 * kChunkBytes);
  std::mt19937 gen(3);
  for (uint8_t& b : host) b = uint8_t(gen());
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, host.size()), cudaSuccess);
  ASSERT_EQ(upload(d, host.data(), host.size()), cudaSuccess);
  std::vector<uint32_t> crcs(64);
  ASSERT_TRUE(peerChunkCrcForTest(d, host.size(), crcs.data()).isOk());
  for (size_t c = 0; c < 64; ++c) EXPECT_EQ(crcs[c], crc32(host.data() + c * kChunkBytes, kChunkBytes)) << c;
  cudaFree(d);
}

// Epochs are 64-bit: a window whose sequence stands just below 2^32 (set on every rank, with `done` to match,
// as after four billion collectives) runs collectives across it, exact, with faults re-read; a 32-bit epoch
// would have come back to 0, the value of every entry never published.
TEST_F(PeerAllreduce, EpochsGoOnPast2To32) {
  const uint64_t start = (uint64_t(1) << 32) - 3;
  for (size_t offset : {kSeqOffset, kDoneOffset}) {
    ASSERT_EQ(upload(static_cast<char*>(windows_->window(windows_->rank())) + offset, &start, sizeof start),
              cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 6; ++i) runExact(size_t(1) << 16, 0, false, 0.01);
  uint64_t seq = 0;
  ASSERT_EQ(cudaMemcpy(&seq, static_cast<char*>(windows_->window(windows_->rank())) + kSeqOffset, sizeof seq,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(seq, start + 6);
}

// The legacy CUDA IPC handles (RINGGUARD_PEER_HANDLES=ipc: where pidfd_getfd is refused) map the same
// windows: the same collectives, exact, with faults; the windows close without leaving one allocated.
TEST_F(PeerAllreduce, LegacyIpcHandlesMapTheSameWindows) {
  windows_.reset();
  Status st = PeerWindows::create(*bootstrap_, 0, 1 << 22, PeerHandles::kIpc, &windows_);
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(windows_->handles(), PeerHandles::kIpc);
  EXPECT_TRUE(windows_->oneDevice());
  for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20}) runExact(count, 0, false, 0.01);
  size_t freeBefore = 0, freeAfter = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&freeBefore, &total), cudaSuccess);
  windows_.reset();  // every rank at once: each waits for its peers' close flags before freeing its own
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_EQ(cudaMemGetInfo(&freeAfter, &total), cudaSuccess);
  EXPECT_GT(freeAfter, freeBefore) << "this rank's window was not freed";
}

TEST_F(PeerAllreduce, ExactForEveryShape) {
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(255), size_t(1000), size_t(256 * 3 + 1),
                       size_t(1) << 20, size_t(16) << 20}) {
    runExact(count, 0, false);
    runExact(count, 0, true);
    runExact(count, 4, false);  // not 16-byte aligned
  }
}

// Every dtype and op against the host reduction (core/reduce.cc) in the same order, ranks 0..N-1: the
// kernel's element code is the host's (core/element_ops.h), so the bits must match, NaN payloads included.
TEST_F(PeerAllreduce, EveryDtypeAndOpEqualsTheHostReductionInRankOrder) {
  const int size = windows_->size(), rank = windows_->rank();
  std::vector<ReduceOp> ops(std::begin(kAllReduceOps), std::end(kAllReduceOps));
  ReduceOp premul = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.75, &premul).isOk());
  ops.push_back(premul);
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : ops) {
      if (!reduceSupported(t, op)) continue;
      for (size_t count : {size_t(1), size_t(333), size_t(4099)}) {
        const size_t bytes = count * dataTypeSize(t);
        auto inputOf = [&](int r) { return randomInput(t, count, r, uint32_t(baseOp(op))); };
        std::vector<uint8_t> want = inputOf(0);
        for (int p = 1; p < size; ++p) {
          const std::vector<uint8_t> x = inputOf(p);
          reduceHost(t, op, want.data(), x.data(), want.data(), count, p == size - 1, size, p == 1);
        }
        void *dIn = nullptr, *dOut = nullptr;
        ASSERT_EQ(cudaMalloc(&dIn, bytes), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&dOut, bytes), cudaSuccess);
        const std::vector<uint8_t> in = inputOf(rank);
        ASSERT_EQ(upload(dIn, in.data(), bytes), cudaSuccess);
        PeerAllreduceArgs a = args(dIn, dOut, count);
        a.dtype = t;
        a.op = op;
        a.fingerprint[1] = uint32_t(t);
        a.fingerprint[2] = uint32_t(baseOp(op));
        Status st = launchPeerAllreduce(a, stream_);
        ASSERT_TRUE(st.isOk()) << st.toString();
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        ASSERT_EQ(windows_->errorRecord()->code, 0u);
        std::vector<uint8_t> got(bytes);
        ASSERT_EQ(cudaMemcpy(got.data(), dOut, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(got, want) << dataTypeName(t) << " " << reduceOpName(op) << " count " << count;
        cudaFree(dIn);
        cudaFree(dOut);
      }
    }
  }
}

TEST_F(PeerAllreduce, InjectedReadFaultsAreDetectedAndTheResultIsExact) {
  for (size_t count : {size_t(4096), size_t(1) << 20, size_t(16) << 20}) runExact(count, 0, false, 0.01);
  const ErrorRecord* rec = windows_->errorRecord();
  EXPECT_GT(rec->injected, 0u);
  EXPECT_EQ(rec->detected, rec->injected);
}

TEST_F(PeerAllreduce, CapturedInAGraphAndReplayed) {
  const size_t count = 1 << 16, bytes = count * 4;
  DeviceBuffers b(count);
  float *dIn = b.in, *dOut = b.out;
  PeerAllreduceArgs a = args(dIn, dOut, count);
  a.fault.probability = 0.02;
  a.fault.seed = 11;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(launchPeerAllreduce(a, stream_).isOk());
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const std::vector<float> want = expected(windows_->size(), count);
  for (int replay = 0; replay < 20; ++replay) {
    const std::vector<float> in = input(windows_->rank(), count);
    // Stream-ordered: the default stream does not order a non-blocking stream.
    ASSERT_EQ(cudaMemcpyAsync(dIn, in.data(), bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dOut, 0xff, bytes, stream_), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(windows_->errorRecord()->code, 0u);
    std::vector<float> got(count);
    ASSERT_EQ(cudaMemcpy(got.data(), dOut, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "replay " << replay;
  }
  EXPECT_GT(windows_->errorRecord()->injected, 0u);
  EXPECT_EQ(windows_->errorRecord()->detected, windows_->errorRecord()->injected);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(PeerAllreduce, DifferentCountsFailEveryRankNamingAPeer) {
  const size_t count = 4096 + size_t(windows_->rank()) * 512;
  DeviceBuffers b(count);
  float *dIn = b.in, *dOut = b.out;
  PeerAllreduceArgs a = args(dIn, dOut, count);
  a.timeoutNs = 5ull * 1000 * 1000 * 1000;
  ASSERT_TRUE(launchPeerAllreduce(a, stream_).isOk());
  expectEveryRankFailedOnAMismatch();
}

TEST_F(PeerAllreduce, AStoppedPeerIsNamedAtTheDeadline) {
  const size_t count = 4096;
  DeviceBuffers b(count);
  float *dIn = b.in, *dOut = b.out;
  const int stopped = windows_->size() - 1;
  if (windows_->rank() != stopped) {
    PeerAllreduceArgs a = args(dIn, dOut, count);
    a.timeoutNs = 300ull * 1000 * 1000;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(launchPeerAllreduce(a, stream_).isOk());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_EQ(rec->code, uint32_t(PeerError::kTimeout));
    EXPECT_EQ(rec->peer, stopped);
    EXPECT_LT(ms, 5000.0);
  }
}

TEST_F(PeerAllreduce, AbortReleasesASpinningKernel) {
  const size_t count = 4096;
  DeviceBuffers b(count);
  float *dIn = b.in, *dOut = b.out;
  if (windows_->rank() == 0) {
    PeerAllreduceArgs a = args(dIn, dOut, count);  // 20 s deadline: only the abort can end it sooner
    ASSERT_TRUE(launchPeerAllreduce(a, stream_).isOk());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto t0 = std::chrono::steady_clock::now();
    *reinterpret_cast<volatile uint32_t*>(&windows_->errorRecord()->abortRequested) = 1;
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(windows_->errorRecord()->code, uint32_t(PeerError::kAborted));
    EXPECT_LT(ms, 1000.0);
  }
}

}  // namespace
}  // namespace peer
}  // namespace ringguard

namespace ringguard {
namespace {

// The peer-window path as users reach it: a device communicator from the factory, its allreduce of float32
// sums on the path's kernel (no host work), other dtypes on the host-driven pipeline, faults from Options.
class PeerCommunicator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
    ASSERT_TRUE(mpi::createBootstrap(MPI_COMM_WORLD, &bootstrap_).isOk());
  }
  std::unique_ptr<Communicator> make(const Options& o) {
    cuda::DeviceOptions d;
    d.transport = cuda::DeviceTransportKind::kPeer;
    d.peerBytes = 8u << 20;
    std::unique_ptr<Communicator> c;
    Status st = cuda::createDeviceCommunicator(*bootstrap_, o, d, &c);
    EXPECT_TRUE(st.isOk()) << st.toString();
    return c;
  }
  std::unique_ptr<Bootstrap> bootstrap_;
};

// Within the window (8 MiB here) an allreduce of any dtype the engine reduces takes the peer path (no slice
// goes through the transport); above it, the ring (slices sent). Both exact, with faults on both.
TEST_F(PeerCommunicator, AllreducesWithinTheWindowTakeThePeerPathAndLargerOnesTheRing) {
  Options o;
  o.fault.probability = 0.02;
  o.fault.seed = 5;
  std::unique_ptr<Communicator> c = make(o);
  ASSERT_TRUE(c);
  const int rank = c->rank(), size = c->size();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20, size_t(3) << 20}) {
    const uint64_t slicesBefore = c->counters().slicesSent;
    std::vector<float> in(count), want(count, 0.f);
    std::vector<int32_t> inI(count), wantI(count, 0);
    for (size_t i = 0; i < count; ++i) {
      in[i] = float((rank + 1) * int(i % 13));
      inI[i] = (rank + 1) * int(i % 17);
      for (int r = 0; r < size; ++r) {
        want[i] += float((r + 1) * int(i % 13));
        wantI[i] += (r + 1) * int(i % 17);
      }
    }
    void *d = nullptr, *dI = nullptr;
    ASSERT_EQ(cudaMalloc(&d, count * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dI, count * 4), cudaSuccess);
    ASSERT_EQ(peer::upload(d, in.data(), count * 4), cudaSuccess);
    ASSERT_EQ(peer::upload(dI, inI.data(), count * 4), cudaSuccess);
    auto w = c->allreduceAsync(d, d, count, DataType::kFloat32, ReduceOp::kSum, s);
    Status st = c->allreduce(dI, dI, count, DataType::kInt32, ReduceOp::kSum, s);
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    st = w->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<float> got(count);
    std::vector<int32_t> gotI(count);
    ASSERT_EQ(cudaMemcpy(got.data(), d, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gotI.data(), dI, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), count * 4), 0) << count;
    EXPECT_EQ(gotI, wantI) << count;
    // 12 MiB is past the 8 MiB window: the ring's slices; the rest none.
    if (count * 4 > (size_t(8) << 20)) {
      EXPECT_GT(c->counters().slicesSent, slicesBefore) << count;
    } else {
      EXPECT_EQ(c->counters().slicesSent, slicesBefore) << count;
    }
    cudaFree(d);
    cudaFree(dI);
  }
  const Counters k = c->counters();
  EXPECT_GT(k.injected, 0u);
  EXPECT_EQ(k.detected, k.injected);
  EXPECT_EQ(k.escaped, 0u);
  EXPECT_EQ(c->summary().byKind.at("allreduce").calls, 8u);
  cudaStreamDestroy(s);
}

// Calls issued on two streams alternately: each kernel takes its epoch from the window when it runs, so two
// of them running at once would share one; the path orders them in issue order
// (runtime/device/stream_chain.h). Every result exact, with faults.
TEST_F(PeerCommunicator, CallsOnTwoStreamsRunInIssueOrder) {
  Options o;
  o.fault.probability = 0.02;
  o.fault.seed = 11;
  std::unique_ptr<Communicator> c = make(o);
  ASSERT_TRUE(c);
  const int rank = c->rank(), size = c->size();
  cudaStream_t s[2] = {nullptr, nullptr};
  for (cudaStream_t& x : s) ASSERT_EQ(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking), cudaSuccess);
  constexpr int kCalls = 40;
  const size_t count = size_t(1) << 16;
  std::vector<float*> d(kCalls, nullptr);
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < kCalls; ++i) {
    std::vector<float> in(count);
    for (size_t j = 0; j < count; ++j) in[j] = float((rank + 1) * (i + 1) + int(j % 7));
    EXPECT_EQ(cudaMalloc(&d[i], count * 4), cudaSuccess);
    EXPECT_EQ(peer::upload(d[i], in.data(), count * 4), cudaSuccess);
  }
  for (int i = 0; i < kCalls; ++i) {
    works.push_back(c->allreduceAsync(d[i], d[i], count, DataType::kFloat32, ReduceOp::kSum, s[i % 2]));
  }
  for (cudaStream_t x : s) EXPECT_EQ(cudaStreamSynchronize(x), cudaSuccess);
  for (auto& w : works) {
    const Status st = w->wait();
    EXPECT_TRUE(st.isOk()) << st.toString();
  }
  const int ranks = size * (size + 1) / 2;  // sum of rank + 1
  for (int i = 0; i < kCalls; ++i) {
    std::vector<float> got(count);
    EXPECT_EQ(cudaMemcpy(got.data(), d[i], count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t wrong = 0;
    for (size_t j = 0; j < count; ++j) wrong += got[j] != float(ranks * (i + 1) + size * int(j % 7));
    EXPECT_EQ(wrong, 0u) << "call " << i << " on stream " << i % 2;
    cudaFree(d[i]);
  }
  const Counters k = c->counters();
  EXPECT_GT(k.injected, 0u);
  EXPECT_EQ(k.detected, k.injected);
  for (cudaStream_t x : s) cudaStreamDestroy(x);
}

// Issue 42's "0 host synchronisations per collective", counted by construction: the caller's stream is held
// by a host function that returns only when the test opens its gate, after the last call. A call that
// synchronised the stream, an event recorded on it or the device would wait for the gate (bounded: the host
// function gives up after 20 s, so that shows as a failure, not a hang). Every collective of the path, then,
// must return while its stream has not even started it; none may send a slice through the transport (the
// host-driven pipeline would return at once too, its progress thread doing the waiting); and all must be
// exact once the gate opens.
TEST_F(PeerCommunicator, NoCollectiveWaitsOnTheHost) {
  std::unique_ptr<Communicator> c = make(Options());
  ASSERT_TRUE(c);
  const int rank = c->rank(), size = c->size();
  const int sum = size * (size + 1) / 2;  // of rank + 1 over the ranks
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const size_t n = 1024, big = size_t(1) << 20;  // 4 KiB blocks; 4 MiB: the two-shot (its default threshold)
  std::vector<float*> bufs;
  const auto device = [&](const std::vector<float>& host) {
    float* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(host.size(), 1) * 4), cudaSuccess);
    EXPECT_EQ(peer::upload(d, host.data(), host.size() * 4), cudaSuccess);
    bufs.push_back(d);
    return d;
  };
  const auto filled = [](size_t count, auto value) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = float(value(i));
    return v;
  };
  const int right = (rank + 1) % size, left = (rank + size - 1) % size, root = size - 1;
  float* small = device(filled(n, [&](size_t i) { return (rank + 1) * int(i % 13); }));
  float* large = device(filled(big, [&](size_t i) { return (rank + 1) * int(i % 11); }));
  float* gatherIn = device(filled(n, [&](size_t i) { return rank * 1000 + int(i % 17); }));
  float* gatherOut = device(std::vector<float>(n * size, -1.f));
  float* bcast = device(filled(n, [&](size_t i) { return rank == root ? 7 + int(i % 19) : -1; }));
  float* scatterIn = device(filled(n * size, [&](size_t i) { return (rank + 1) * int(i % 23); }));
  float* scatterOut = device(std::vector<float>(n, -1.f));
  float* allIn =
      device(filled(n * size, [&](size_t i) { return rank * 100000 + int(i / n) * 1000 + int(i % n % 29); }));
  float* allOut = device(std::vector<float>(n * size, -1.f));
  float* sendBuf = device(filled(n, [&](size_t i) { return rank * 1000 + int(i % 31); }));
  float* recvBuf = device(std::vector<float>(n, -1.f));
  // Set-up that happens once per communicator is done before the stream is held.
  float* warm = device(std::vector<float>(n, 1.f));
  EXPECT_TRUE(c->allreduce(warm, warm, n, DataType::kFloat32, ReduceOp::kSum, s).isOk());
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  std::atomic<bool> gate{false};
  const auto hold = [](void* p) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!static_cast<std::atomic<bool>*>(p)->load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  ASSERT_EQ(cudaLaunchHostFunc(s, hold, &gate), cudaSuccess);
  const uint64_t slicesBefore = c->counters().slicesSent;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, std::shared_ptr<Work>>> works;
  const auto issued = [&](const char* what, std::shared_ptr<Work> w) {
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << what << " returned only after its stream ran";
    works.emplace_back(what, std::move(w));
  };
  issued("allreduce (one-shot)", c->allreduceAsync(small, small, n, DataType::kFloat32, ReduceOp::kSum, s));
  issued("allreduce (two-shot)", c->allreduceAsync(large, large, big, DataType::kFloat32, ReduceOp::kSum, s));
  issued("allgather", c->allgatherAsync(gatherIn, gatherOut, n, DataType::kFloat32, s));
  issued("broadcast", c->broadcastAsync(bcast, bcast, n, DataType::kFloat32, root, s));
  issued("reduce_scatter",
         c->reduceScatterAsync(scatterIn, scatterOut, n, DataType::kFloat32, ReduceOp::kSum, s));
  issued("alltoall", c->alltoallAsync(allIn, allOut, n, DataType::kFloat32, s));
  issued("sendrecv", c->sendRecvAsync(sendBuf, n, right, recvBuf, n, left, DataType::kFloat32, s));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  gate.store(true);
  EXPECT_LT(took, 10.0) << "the calls waited for their held stream";
  EXPECT_EQ(c->counters().slicesSent, slicesBefore) << "a collective took the host-driven pipeline";
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (auto& [what, w] : works) {
    const Status st = w->wait();
    EXPECT_TRUE(st.isOk()) << what << ": " << st.toString();
  }
  const auto expectAll = [&](const char* what, const float* d, size_t count, auto want) {
    std::vector<float> got(count);
    EXPECT_EQ(cudaMemcpy(got.data(), d, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += got[i] != float(want(i));
    EXPECT_EQ(wrong, 0u) << what;
  };
  expectAll("allreduce (one-shot)", small, n, [&](size_t i) { return sum * int(i % 13); });
  expectAll("allreduce (two-shot)", large, big, [&](size_t i) { return sum * int(i % 11); });
  expectAll("allgather", gatherOut, n * size, [&](size_t i) { return int(i / n) * 1000 + int(i % n % 17); });
  expectAll("broadcast", bcast, n, [&](size_t i) { return 7 + int(i % 19); });
  expectAll("reduce_scatter", scatterOut, n, [&](size_t i) { return sum * int((rank * n + i) % 23); });
  expectAll("alltoall", allOut, n * size,
            [&](size_t i) { return int(i / n) * 100000 + rank * 1000 + int(i % n % 29); });
  expectAll("sendrecv", recvBuf, n, [&](size_t i) { return left * 1000 + int(i % 31); });
  for (float* d : bufs) cudaFree(d);
  cudaStreamDestroy(s);
}

TEST_F(PeerCommunicator, AStoppedPeerFailsTheNextCallNamingIt) {
  Options o;
  o.timeout = std::chrono::milliseconds(300);
  std::unique_ptr<Communicator> c = make(o);
  ASSERT_TRUE(c);
  const int stopped = c->size() - 1;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4096 * 4), cudaSuccess);
  if (c->rank() != stopped) {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    auto w = c->allreduceAsync(d, d, 4096, DataType::kFloat32, ReduceOp::kSum, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    Status st = w->wait();
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
    EXPECT_NE(st.message().find("rank " + std::to_string(stopped)), std::string::npos) << st.toString();
    st = c->allreduce(d, d, 4096, DataType::kFloat32, ReduceOp::kSum, s);
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << "the communicator stays poisoned: " << st.toString();
    cudaStreamDestroy(s);
    c->abort("test over");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  cudaFree(d);
}

// A call whose arguments fail one rank's own checks (rank 1: no output buffer) is declined on the windows
// (DirectPath::decline): the other ranks' kernels fail at once with the mismatch naming rank 1's rejected
// call, not at their deadline (60 s here); rank 1 gets its own kInvalidArgument. A call every rank rejects
// alike leaves the communicator usable (docs/design/protocol.md, "A call rejected on one rank").
TEST_F(PeerCommunicator, ACallRejectedOnOneRankFailsTheOthersAtOnceNamingIt) {
  Options o;
  o.timeout = std::chrono::milliseconds(60000);
  std::unique_ptr<Communicator> c = make(o);
  ASSERT_TRUE(c);
  ASSERT_STREQ(c->transportName(), "peer");
  const int rank = c->rank(), rejecting = 1;
  const size_t n = 4096;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, n * 4), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // No ASSERT until the barrier below: a rank that returned early would leave the others waiting in it.
  Status st = c->allreduceAsync(nullptr, nullptr, n, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  st = c->allreduceAsync(d, d, n, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  if (st.isOk()) st = c->allreduceAsync(d, d, n, DataType::kFloat32, ReduceOp::kSum, s)->wait();
  EXPECT_TRUE(st.isOk()) << "every rank rejected the same call: the communicator goes on: " << st.toString();

  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Work> w =
      c->allreduceAsync(d, rank == rejecting ? nullptr : d, n, DataType::kFloat32, ReduceOp::kSum, s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st = w->wait();
  EXPECT_LT(took, 10.0) << "the kernels waited for the declined call until their deadline";
  if (rank == rejecting) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_NE(st.message().find("allreduce on rank 1"), std::string::npos) << st.toString();
  } else {
    EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << st.toString();
    EXPECT_NE(st.message().find("invalid-arguments"), std::string::npos) << st.toString();
    EXPECT_NE(st.message().find("rank 1 rejected the arguments"), std::string::npos) << st.toString();
  }
  st = c->allreduce(d, d, n, DataType::kFloat32, ReduceOp::kSum, s);
  EXPECT_FALSE(st.isOk()) << "the communicator stays poisoned after the mismatch";
  c->abort("test over");
  MPI_Barrier(MPI_COMM_WORLD);
  cudaStreamDestroy(s);
  cudaFree(d);
}

}  // namespace
}  // namespace ringguard
