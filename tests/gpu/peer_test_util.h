#pragma once
// What the peer-window tests under mpirun share (test_peer_allreduce.cc, test_peer_collectives.cc): inputs of
// every dtype whose reductions the host computes with the kernels' bits, and the window fixture.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bootstrap/mpi_bootstrap.h"
#include "core/float16.h"
#include "cuda/peer/peer_collectives.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/device_factory.h"
#include "transport/peer/peer_window.h"

namespace ringguard {
namespace peer {

// The fault modes that damage a read (every one but delay), for the tests that run each.
inline constexpr uint8_t kDamagingFaultModes[] = {
    PeerFault::kBitFlip, PeerFault::kMultiBit,   PeerFault::kBurst,  PeerFault::kGarbage,
    PeerFault::kTrailer, PeerFault::kRetransmit, PeerFault::kControl};

// Every rank of MPI_COMM_WORLD sees a CUDA device (the communicator-level tests skip otherwise, alike).
inline bool everyRankHasAGpu() {
  int n = 0, all = 0;
  int mine = (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) ? 1 : 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

// A device communicator over MPI_COMM_WORLD with the peer path asked for by name
// (RINGGUARD_DEVICE_TRANSPORT=peer) and the caller's options; `bootstrap` must outlive it.
inline void makePeerCommunicator(const Options& o, cuda::DeviceOptions d,
                                 std::unique_ptr<Bootstrap>* bootstrap, std::unique_ptr<Communicator>* c) {
  ASSERT_TRUE(mpi::createBootstrap(MPI_COMM_WORLD, bootstrap).isOk());
  d.transport = cuda::DeviceTransportKind::kPeer;
  const Status st = cuda::createDeviceCommunicator(**bootstrap, o, d, c);
  ASSERT_TRUE(st.isOk()) << st.toString();
}

// A communicator-level test's start: a peer communicator (makePeerCommunicator) whose Options inject read
// faults (2 % of chunk reads, from `seed`: every one must be detected) and a non-blocking stream of its own,
// destroyed with it.
struct FaultyPeerCommunicator {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Communicator> c;
  cudaStream_t stream = nullptr;
  FaultyPeerCommunicator() = default;
  FaultyPeerCommunicator(const FaultyPeerCommunicator&) = delete;
  FaultyPeerCommunicator& operator=(const FaultyPeerCommunicator&) = delete;
  ~FaultyPeerCommunicator() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};
inline void makeFaultyPeerCommunicator(uint32_t seed, const cuda::DeviceOptions& d,
                                       FaultyPeerCommunicator* out) {
  Options o;
  o.fault.probability = 0.02;
  o.fault.seed = seed;
  ASSERT_NO_FATAL_FAILURE(makePeerCommunicator(o, d, &out->bootstrap, &out->c));
  ASSERT_EQ(cudaStreamCreateWithFlags(&out->stream, cudaStreamNonBlocking), cudaSuccess);
}

// Every rank's closing barrier at the end of a test's scope, however the test returns (an ASSERT on one rank
// must not leave the others a barrier short: the next test's MPI calls would pair with the wrong ones).
struct BarrierAtExit {
  BarrierAtExit() = default;
  BarrierAtExit(const BarrierAtExit&) = delete;
  BarrierAtExit& operator=(const BarrierAtExit&) = delete;
  ~BarrierAtExit() { MPI_Barrier(MPI_COMM_WORLD); }
};

// The send/recv tests' communicator (makeFaultyPeerCommunicator): a 4 MiB window and send/recv slots of
// 64 KiB, so that a message of a few hundred KiB takes several rounds.
inline void makeSendRecvPeerCommunicator(uint32_t seed, FaultyPeerCommunicator* out) {
  cuda::DeviceOptions d;
  d.peerBytes = 4u << 20;
  d.peerP2pBytes = 64u << 10;
  makeFaultyPeerCommunicator(seed, d, out);
}

// `count` elements of `t` for rank r (seeded by `salt`): integers and bools from random bits; floating types
// from small random multiples of 1/4 (no NaN: an IEEE op on two NaNs may return either payload, on the host
// as on the device).
inline std::vector<uint8_t> randomInput(DataType t, size_t count, int r, uint32_t salt) {
  const size_t bytes = count * dataTypeSize(t);
  std::vector<uint8_t> v(bytes);
  std::mt19937 gen(1000u * uint32_t(r) + uint32_t(t) * 31u + salt);
  for (uint8_t& b : v) b = uint8_t(gen());
  const auto small = [&] { return float(int(gen() % 101) - 50) / 4.0f; };
  const size_t n = count * (isComplexType(t) ? 2 : 1);
  for (size_t i = 0; i < n; ++i) {
    if (t == DataType::kFloat32 || t == DataType::kComplex64) {
      const float f = small();
      std::memcpy(v.data() + 4 * i, &f, 4);
    } else if (t == DataType::kFloat64 || t == DataType::kComplex128) {
      const double d = small();
      std::memcpy(v.data() + 8 * i, &d, 8);
    } else if (t == DataType::kFloat16 || t == DataType::kBFloat16) {
      const uint16_t h = t == DataType::kFloat16 ? floatToHalf(small()) : floatToBf16(small());
      std::memcpy(v.data() + 2 * i, &h, 2);
    }
  }
  if (t == DataType::kBool)
    for (uint8_t& b : v) b &= 1u;
  return v;
}

// A device buffer of `bytes` (+64 for misaligned views), freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes + 64), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(p); }
  void* p = nullptr;
};

// Setup writes for a kernel on the fixture's non-blocking stream. cudaMemcpy and cudaMemset run on the legacy
// default stream, which does not order a non-blocking stream's work: a pageable host-to-device copy may
// return before its DMA lands and a memset returns at once, so a kernel launched next could read the old
// bytes or have its output poisoned after it wrote it (seen on the H200: wrong results without a CRC error).
// These wait for the device before returning.
inline cudaError_t upload(void* d, const void* h, size_t bytes) {
  const cudaError_t e = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}
inline cudaError_t fill(void* d, int value, size_t bytes) {
  const cudaError_t e = cudaMemset(d, value, bytes);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

inline std::vector<uint8_t> toHost(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Every rank of MPI_COMM_WORLD with windows of `capacity` bytes on GPU 0 (skipped where some rank has none).
class PeerWindowTest : public ::testing::Test {
 protected:
  static constexpr size_t kCapacity = 64u << 20;

  void SetUp() override {
    int n = 0, mine = 0, all = 0;
    mine = (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) ? 1 : 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) GTEST_SKIP() << "no CUDA device on some rank";
    ASSERT_TRUE(mpi::createBootstrap(MPI_COMM_WORLD, &bootstrap_).isOk());
    Status st = PeerWindows::create(*bootstrap_, 0, kCapacity, p2pBytes_, PeerHandles::kAuto, &windows_);
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    windows_.reset();
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // Order at system scope even where every window is on one GPU (the path of GPUs of one host).
  bool systemScope_ = false;
  // Payload bytes per send/recv slot of the windows SetUp makes (0: no channels); set in a constructor.
  size_t p2pBytes_ = 0;
  // The fault mode and its parameters every collective's arguments start from (probability and seed are
  // each call's).
  PeerFault fault_;
  // Every collective's grid behind the arrival kernel (cuda/peer/arrival.cu), as PeerPath sets it for calls
  // above RINGGUARD_PEER_ARRIVAL_BYTES.
  bool arriveFirst_ = false;

  int rank() const { return windows_->rank(); }
  int size() const { return windows_->size(); }

  // The windows, the record and a 20 s deadline in any collective's arguments; fingerprint words as the
  // peer path fills them (kind, dtype, op, count, root).
  template <typename Args>
  Args windowArgs(CollectiveKind kind, DataType dtype, ReduceOp op, size_t count, int root = 0) const {
    Args a;
    a.rank = windows_->rank();
    a.size = windows_->size();
    for (int r = 0; r < a.size; ++r) a.windows[r] = windows_->window(r);
    a.layout = windows_->layout();
    a.record = windows_->errorRecordDevice();
    a.oneDevice = windows_->oneDevice() && !systemScope_;
    a.fault = fault_;
    a.arriveFirst = arriveFirst_;
    a.fingerprint[0] = uint32_t(kind);
    a.fingerprint[1] = uint32_t(dtype);
    a.fingerprint[2] = uint32_t(baseOp(op));
    a.fingerprint[3] = uint32_t(count);
    a.fingerprint[4] = uint32_t(uint64_t(count) >> 32);
    a.fingerprint[5] = uint32_t(root);
    a.timeoutNs = 20ull * 1000 * 1000 * 1000;
    return a;
  }

  // After a collective whose ranks disagree: this rank's record holds a fingerprint mismatch or a failed peer
  // (never itself) and, with `checkSomeRankSawIt`, some rank saw the mismatch itself (a collective over MPI).
  void expectEveryRankFailedOnAMismatch(bool checkSomeRankSawIt = true) {
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_TRUE(rec->code == uint32_t(PeerError::kFingerprintMismatch) ||
                rec->code == uint32_t(PeerError::kPeerFailed))
        << "code " << rec->code << " peer " << rec->peer;
    EXPECT_NE(rec->peer, windows_->rank());
    if (!checkSomeRankSawIt) return;
    int mismatch = rec->code == uint32_t(PeerError::kFingerprintMismatch) ? 1 : 0, any = 0;
    MPI_Allreduce(&mismatch, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(any, 1);
  }

  // Waits for the stream; the record must show no error (its fields named when it does).
  void expectClean(const char* what) {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << what;
    const ErrorRecord* rec = windows_->errorRecord();
    ASSERT_EQ(rec->code, 0u) << what << ": code " << rec->code << " peer " << rec->peer << " chunk "
                             << rec->chunk << " epoch " << rec->epoch << " expected " << rec->expected
                             << " seen " << rec->seen;
  }

  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<PeerWindows> windows_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace peer
}  // namespace ringguard
