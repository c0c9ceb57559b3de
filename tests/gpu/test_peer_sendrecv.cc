// Send/recv over peer windows (src/cuda/peer/sendrecv.cu; docs/design/protocol.md, "Send/recv"), under
// mpirun with every rank on the one GPU (run under MPS: scripts/gpu_peer_check.sh). Every result is checked
// bit for bit: every dtype, the counts 0, 1, odd and larger than a slot (several rounds through the two
// slots), unaligned buffers, a ring shift with sendRecv (each rank sends and receives in one kernel),
// send-only and receive-only calls in a row; with injected read faults of every mode (detected == injected,
// result exact); inside a CUDA graph replayed (fresh message numbers on the device) beside a collective; and
// the failures: counts or dtypes that differ (both ends fail naming the other), a missing receiver or sender
// (a timeout naming it).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/peer_p2p_plan.h"
#include "peer_test_util.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/device_factory.h"

namespace ringguard {
namespace peer {
namespace {

constexpr size_t kSlot = 64u << 10;  // small slots: a few hundred KiB take several rounds
constexpr uint64_t kShortDeadlineNs = 300ull * 1000 * 1000;

class PeerSendRecv : public PeerWindowTest {
 protected:
  PeerSendRecv() { p2pBytes_ = kSlot; }

  Status sendRecv(const void* send, size_t sendCount, int dst, void* recv, size_t recvCount, int src,
                  DataType t, double faultProb = 0, uint64_t timeoutNs = 0,
                  DataType recvType = DataType(255)) {
    auto a = windowArgs<PeerSendRecvArgs>(CollectiveKind::kSendRecv, t, ReduceOp::kSum, 0);
    a.send = send;
    a.sendCount = sendCount;
    a.dst = dst;
    a.recv = recv;
    a.recvCount = recvCount;
    a.src = src;
    a.sendDtype = a.recvDtype = t;
    // A receiver that disagrees on the dtype: the launcher folds each direction's dtype into its CRC.
    if (recvType != DataType(255)) a.recvDtype = recvType;
    a.fault.probability = faultProb;
    a.fault.seed = 41 + uint32_t(rank());
    if (timeoutNs != 0) a.timeoutNs = timeoutNs;
    return launchPeerSendRecv(a, stream_);
  }

  // Fresh windows (a failed rank's error word stays set: later calls on the same windows end at once).
  void remakeWindows() {
    windows_.reset();
    const Status made =
        PeerWindows::create(*bootstrap_, 0, 1 << 20, p2pBytes_, PeerHandles::kAuto, &windows_);
    ASSERT_TRUE(made.isOk()) << made.toString();
  }

  // Every rank sends `count` elements of `t` to the next and receives from the previous in one call (a ring
  // shift), `offset` bytes into its buffers; the result is the previous rank's bytes exactly.
  void shiftExact(DataType t, size_t count, size_t offset = 0, double faultProb = 0) {
    const int n = size(), me = rank(), dst = (me + 1) % n, src = (me + n - 1) % n;
    const size_t bytes = count * dataTypeSize(t);
    const std::vector<uint8_t> in = randomInput(t, count, me, uint32_t(count)),
                               want = randomInput(t, count, src, uint32_t(count));
    DeviceBuffer din(bytes), dout(bytes);
    ASSERT_EQ(upload(din.get() + offset, in.data(), bytes), cudaSuccess);
    ASSERT_EQ(fill(dout.p, 0xff, bytes + 64), cudaSuccess);
    const Status st = sendRecv(din.get() + offset, count, dst, dout.get() + offset, count, src, t, faultProb);
    ASSERT_TRUE(st.isOk()) << st.toString();
    expectClean("ring shift");
    ASSERT_TRUE(toHost(dout.get() + offset, bytes) == want)
        << dataTypeName(t) << " count " << count << " offset " << offset;
    const std::vector<uint8_t> after = toHost(dout.get() + offset + bytes, 64 - offset);
    for (uint8_t b : after) ASSERT_EQ(b, 0xff) << "written past the end: count " << count;
  }

  // After a call whose ends disagree: this rank's record holds `code` naming `peer`.
  void expectFailed(PeerError code, int peer) {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_EQ(rec->code, uint32_t(code)) << "peer " << rec->peer << " chunk " << rec->chunk;
    EXPECT_EQ(rec->peer, peer);
  }
  // A count mismatch found by this end (`sending` or receiving) with `peer`: both sizes recorded, in bytes
  // (the kernel's counts: the launcher hands it bytes, each direction's dtype in its fingerprint CRC).
  void expectCountMismatch(int peer, bool sending, size_t mine, size_t theirs) {
    ASSERT_NO_FATAL_FAILURE(expectFailed(PeerError::kMessageMismatch, peer));
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_EQ(rec->chunk, sending ? 0u : 1u) << "which end";
    EXPECT_EQ(rec->expected, uint32_t(mine));
    EXPECT_EQ(rec->seen, uint32_t(theirs));
  }
};

TEST_F(PeerSendRecv, RingShiftExactForEveryDtypeAndCount) {
  for (DataType t : kAllDataTypes) {
    const size_t e = dataTypeSize(t);
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(333), kSlot / e, kSlot / e + 1}) {
      shiftExact(t, count);
    }
  }
  // Several rounds (3.5 slots), unaligned buffers, a large message (64 MiB: 1024 rounds).
  shiftExact(DataType::kFloat32, kSlot * 7 / 8 + 3);
  shiftExact(DataType::kUint8, kSlot * 3 + kSlot / 2 + 5, 3);
  shiftExact(DataType::kFloat64, kSlot * 2 + 1, 8);
  shiftExact(DataType::kFloat32, size_t(16) << 20);
  EXPECT_EQ(windows_->errorRecord()->detected, 0u) << "a fault-free run re-read a chunk";
}

// Send-only and receive-only kernels in a row on one pair (the message numbers of each direction advance on
// their own), the other ranks idle: messages of 0, 1 and several rounds, both directions.
TEST_F(PeerSendRecv, SendOnlyAndReceiveOnlyCallsInARow) {
  const DataType t = DataType::kInt32;
  for (size_t count : {size_t(0), size_t(1), size_t(5000), kSlot, 3 * kSlot + 11}) {
    for (int from : {0, 1}) {
      const int to = 1 - from;
      for (int message = 0; message < 3; ++message) {
        const uint32_t salt = uint32_t(count) + 100u * uint32_t(message);
        const size_t bytes = count * 4;
        DeviceBuffer buf(bytes);
        if (rank() == from) {
          const std::vector<uint8_t> in = randomInput(t, count, from, salt);
          ASSERT_EQ(upload(buf.get(), in.data(), bytes), cudaSuccess);
          ASSERT_TRUE(sendRecv(buf.get(), count, to, nullptr, 0, -1, t).isOk());
          expectClean("send");
        } else if (rank() == to) {
          ASSERT_EQ(fill(buf.p, 0xff, bytes), cudaSuccess);
          ASSERT_TRUE(sendRecv(nullptr, 0, -1, buf.get(), count, from, t).isOk());
          expectClean("receive");
          ASSERT_TRUE(toHost(buf.get(), bytes) == randomInput(t, count, from, salt))
              << "count " << count << " from " << from << " message " << message;
        }
      }
    }
  }
  // Fault-free: no chunk was re-read (a slot overwritten while read would show here first). No barrier of
  // its own: TearDown's is every rank's, whatever returned early.
  EXPECT_EQ(windows_->errorRecord()->detected, 0u);
}

TEST_F(PeerSendRecv, ReadFaultsOfEveryModeAreDetectedAndResultsExact) {
  for (uint8_t mode : kDamagingFaultModes) {
    fault_ = PeerFault{};
    fault_.mode = mode;
    fault_.bits = 3;
    const unsigned long long before = windows_->errorRecord()->injected;
    shiftExact(DataType::kFloat32, kSlot * 2 + 100, 0, 0.05);
    shiftExact(DataType::kBFloat16, 4097, 2, 0.05);
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_GT(rec->injected, before) << "mode " << int(mode);
    EXPECT_EQ(rec->detected, rec->injected) << "mode " << int(mode);
  }
  // A late sender: nothing damaged, nothing counted, the result exact.
  fault_ = PeerFault{};
  fault_.mode = PeerFault::kDelay;
  fault_.delayNs = 2ull * 1000 * 1000;
  const unsigned long long injected = windows_->errorRecord()->injected;
  shiftExact(DataType::kFloat32, 5000, 0, 0.05);
  EXPECT_EQ(windows_->errorRecord()->injected, injected);
}

// A ring shift of several rounds and a one-shot allreduce in one graph, replayed with faults: the message
// numbers are the device's (fresh on every replay), the channels and the collective's halves share no word,
// results exact, detected == injected.
TEST_F(PeerSendRecv, CapturedInAGraphBesideACollectiveAndReplayed) {
  const int n = size(), me = rank(), dst = (me + 1) % n, src = (me + n - 1) % n;
  const size_t count = kSlot / 4 * 3 + 17, bytes = count * 4;
  const std::vector<uint8_t> in = randomInput(DataType::kFloat32, count, me, 5),
                             want = randomInput(DataType::kFloat32, count, src, 5);
  const size_t arCount = 3000;
  std::vector<float> mine(arCount), wantAr(arCount, 0.f);
  for (size_t i = 0; i < arCount; ++i) mine[i] = float(me + 1) * float(i % 97);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < arCount; ++i) wantAr[i] += float(p + 1) * float(i % 97);
  DeviceBuffer din(bytes), dout(bytes), arIn(arCount * 4), arOut(arCount * 4);
  ASSERT_EQ(upload(din.get(), in.data(), bytes), cudaSuccess);
  ASSERT_EQ(upload(arIn.get(), mine.data(), arCount * 4), cudaSuccess);
  auto ar =
      windowArgs<PeerAllreduceArgs>(CollectiveKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, arCount);
  ar.send = arIn.get();
  ar.recv = arOut.get();
  ar.count = arCount;
  ar.fault.probability = 0.02;
  ar.fault.seed = 7 + uint32_t(me);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(sendRecv(din.get(), count, dst, dout.get(), count, src, DataType::kFloat32, 0.02).isOk());
  ASSERT_TRUE(launchPeerAllreduce(ar, stream_).isOk());
  ASSERT_TRUE(sendRecv(din.get(), count, dst, dout.get(), count, src, DataType::kFloat32, 0.02).isOk());
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 10; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(dout.p, 0xff, bytes, stream_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(arOut.p, 0xff, arCount * 4, stream_), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    expectClean("graph replay");
    ASSERT_TRUE(toHost(dout.get(), bytes) == want) << "replay " << replay;
    const std::vector<uint8_t> got = toHost(arOut.get(), arCount * 4);
    ASSERT_EQ(std::memcmp(got.data(), wantAr.data(), arCount * 4), 0) << "allreduce, replay " << replay;
  }
  EXPECT_GT(windows_->errorRecord()->injected, 0u);
  EXPECT_EQ(windows_->errorRecord()->detected, windows_->errorRecord()->injected);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Rank 1 expects a different count (or dtype) from rank 0 than rank 0 sends: both ends fail on that call,
// each naming the other and both counts, whether the message fits the two slots or not; other ranks idle.
TEST_F(PeerSendRecv, EndsThatDisagreeBothFailNamingEachOther) {
  struct Case {
    size_t sent, expected;
  };
  for (const Case c : {Case{100, 101}, Case{0, 1}, Case{3 * kSlot, 1}, Case{1, 3 * kSlot}}) {
    ASSERT_NO_FATAL_FAILURE(remakeWindows());
    DeviceBuffer buf(std::max(c.sent, c.expected) * 4);
    const uint64_t deadline = 5ull * 1000 * 1000 * 1000;
    if (rank() == 0) {
      EXPECT_TRUE(sendRecv(buf.get(), c.sent, 1, nullptr, 0, -1, DataType::kFloat32, 0, deadline).isOk());
      expectCountMismatch(1, /*sending=*/true, c.sent * 4, c.expected * 4);
    } else if (rank() == 1) {
      EXPECT_TRUE(sendRecv(nullptr, 0, -1, buf.get(), c.expected, 0, DataType::kFloat32, 0, deadline).isOk());
      expectCountMismatch(0, /*sending=*/false, c.expected * 4, c.sent * 4);
    }
  }
  // The same count of another dtype: the fingerprints differ, on both ends.
  ASSERT_NO_FATAL_FAILURE(remakeWindows());
  DeviceBuffer buf(4096);
  if (rank() == 0) {
    EXPECT_TRUE(sendRecv(buf.get(), 1000, 1, nullptr, 0, -1, DataType::kFloat32).isOk());
    expectFailed(PeerError::kFingerprintMismatch, 1);
  } else if (rank() == 1) {
    EXPECT_TRUE(
        sendRecv(nullptr, 0, -1, buf.get(), 1000, 0, DataType::kFloat32, 0, 0, DataType::kInt32).isOk());
    expectFailed(PeerError::kFingerprintMismatch, 0);
  }
  // No barrier of its own (TearDown's): a rank that returned early must not leave the others one short.
}

// A send whose receiver never comes (one that fits the slots and one that does not), and a receive whose
// sender never comes: each ends at its deadline naming the other end.
TEST_F(PeerSendRecv, AMissingEndTimesOutNamingIt) {
  for (size_t count : {size_t(10), 3 * kSlot}) {
    for (bool senderWaits : {true, false}) {
      ASSERT_NO_FATAL_FAILURE(remakeWindows());
      DeviceBuffer buf(count * 4);
      const int waiting = senderWaits ? 0 : 1, missing = 1 - waiting;
      if (rank() == waiting) {
        const Status st = senderWaits ? sendRecv(buf.get(), count, missing, nullptr, 0, -1,
                                                 DataType::kFloat32, 0, kShortDeadlineNs)
                                      : sendRecv(nullptr, 0, -1, buf.get(), count, missing,
                                                 DataType::kFloat32, 0, kShortDeadlineNs);
        EXPECT_TRUE(st.isOk()) << st.toString();  // EXPECT: the barrier below is every rank's
        const auto t0 = std::chrono::steady_clock::now();
        expectFailed(PeerError::kTimeout, missing);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(ms, 5000.0);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

TEST_F(PeerSendRecv, RefusesWhatHasNoChannel) {
  DeviceBuffer buf(64);
  const Status self = sendRecv(buf.get(), 4, rank(), buf.get() + 32, 4, rank(), DataType::kFloat32);
  EXPECT_EQ(self.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(self.message().find("is this rank"), std::string::npos) << self.message();
  const Status overlap = sendRecv(buf.get(), 8, (rank() + 1) % size(), buf.get() + 16, 8,
                                  (rank() + size() - 1) % size(), DataType::kFloat32);
  EXPECT_EQ(overlap.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.message().find("overlap"), std::string::npos) << overlap.message();
  const Status none = sendRecv(nullptr, 0, -1, nullptr, 0, -1, DataType::kFloat32);
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(windows_->errorRecord()->code, 0u) << "nothing was launched";
}

}  // namespace
}  // namespace peer

namespace {

// Send/recv as users reach it: a device communicator made with RINGGUARD_DEVICE_TRANSPORT=peer hands
// sendRecv between its ranks to the peer path (a ring shift, send-only and receive-only, exact with faults
// from Options; captured in a CUDA graph, which the host-driven path refuses, so this shows the path took
// it), and ends that disagree on the count both end with the error naming both counts.
TEST(PeerCommunicatorSendRecv, ExplicitPeerTakesSendRecvExactlyAndInAGraph) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::FaultyPeerCommunicator fc;
  ASSERT_NO_FATAL_FAILURE(peer::makeSendRecvPeerCommunicator(9, &fc));
  const peer::BarrierAtExit barrierAtExit;  // before the communicator goes
  Communicator* c = fc.c.get();
  cudaStream_t s = fc.stream;
  const int rank = c->rank(), size = c->size(), dst = (rank + 1) % size, src = (rank + size - 1) % size;
  const DataType t = DataType::kFloat32;
  const size_t count = 50000;  // four rounds of 64 KiB (200000 bytes)
  const std::vector<uint8_t> in = peer::randomInput(t, count, rank, 1),
                             want = peer::randomInput(t, count, src, 1);
  peer::DeviceBuffer din(count * 4), dout(count * 4);
  ASSERT_EQ(peer::upload(din.get(), in.data(), count * 4), cudaSuccess);
  auto check = [&](const char* what) {
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(peer::toHost(dout.get(), count * 4) == want) << what;
  };
  Status st = c->sendRecv(din.get(), count, dst, dout.get(), count, src, t, s);
  ASSERT_TRUE(st.isOk()) << st.toString();
  check("sendRecv");
  // Send-only, then receive-only, around the ring: rank 0 sends first, the others receive first.
  ASSERT_EQ(cudaMemsetAsync(dout.p, 0, count * 4, s), cudaSuccess);
  if (rank == 0) {
    ASSERT_TRUE(c->sendRecv(din.get(), count, dst, nullptr, 0, -1, t, s).isOk());
    ASSERT_TRUE(c->sendRecv(nullptr, 0, -1, dout.get(), count, src, t, s).isOk());
  } else {
    ASSERT_TRUE(c->sendRecv(nullptr, 0, -1, dout.get(), count, src, t, s).isOk());
    ASSERT_TRUE(c->sendRecv(din.get(), count, dst, nullptr, 0, -1, t, s).isOk());
  }
  check("send, then receive");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dout.p, 0, count * 4, s), cudaSuccess);
  st = c->sendRecvAsync(din.get(), count, dst, dout.get(), count, src, t, s)->wait();
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 5; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    check("graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  const Counters k = c->counters();
  EXPECT_GT(k.injected, 0u);
  EXPECT_EQ(k.detected, k.injected);

  // Rank 1 expects one element more from rank 0 than it sends: both calls end with both counts named.
  if (rank <= 1) {
    const size_t mine = rank == 0 ? 100 : 101;
    std::shared_ptr<Work> w = rank == 0 ? c->sendRecvAsync(din.get(), mine, 1, nullptr, 0, -1, t, s)
                                        : c->sendRecvAsync(nullptr, 0, -1, dout.get(), mine, 0, t, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    st = w->wait();
    EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << st.toString();
    EXPECT_NE(st.message().find("rank 0 sends 400 bytes to rank 1, which expects 404 bytes"),
              std::string::npos)
        << st.message();
  }
}

// Grouped send/recv (Communicator::sendRecvGroupAsync) on the windows: a ring both ways whose ranks list
// their ops in different orders (each op issued alone in such an order would deadlock: every send waits for
// its receive), each direction in its own dtype; an all-to-all listed in rank order on even ranks and
// reversed on odd ones; exact with read faults (detected == injected); and a dtype of the same bytes that
// differs failing both ends.
TEST(PeerCommunicatorSendRecv, GroupedRoundsDoNotDeadlockAndCarryADtypePerDirection) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  peer::FaultyPeerCommunicator fc;
  ASSERT_NO_FATAL_FAILURE(peer::makeSendRecvPeerCommunicator(9, &fc));
  const peer::BarrierAtExit barrierAtExit;
  Communicator* c = fc.c.get();
  cudaStream_t s = fc.stream;
  ASSERT_TRUE(c->sendRecvOnPeerWindows());
  const int rank = c->rank(), n = c->size(), right = (rank + 1) % n, left = (rank + n - 1) % n;
  const DataType types[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64};
  const auto typeOf = [&](int r) { return types[r % 3]; };
  const size_t count = 30001;  // several rounds of 64 KiB in every dtype
  const auto input = [&](int from, int to, DataType t) {
    return peer::randomInput(t, count, from * 16 + to, uint32_t(count));
  };
  std::vector<std::unique_ptr<peer::DeviceBuffer>> bufs;
  const auto device = [&](const std::vector<uint8_t>& host) {
    bufs.push_back(std::make_unique<peer::DeviceBuffer>(host.size() + 16));
    EXPECT_EQ(peer::upload(bufs.back()->get(), host.data(), host.size()), cudaSuccess);
    return bufs.back()->get();
  };
  for (int pass = 0; pass < 2; ++pass) {
    bufs.clear();
    // Both ways around the ring, each rank sending in its dtype.
    std::vector<P2pOp> ops = {
        P2pOp{P2pOp::Kind::kSend, right, device(input(rank, right, typeOf(rank))), count, typeOf(rank)},
        P2pOp{P2pOp::Kind::kSend, left, device(input(rank, left, typeOf(rank))), count, typeOf(rank)},
        P2pOp{P2pOp::Kind::kRecv, left, device(std::vector<uint8_t>(count * dataTypeSize(typeOf(left)))),
              count, typeOf(left)},
        P2pOp{P2pOp::Kind::kRecv, right, device(std::vector<uint8_t>(count * dataTypeSize(typeOf(right)))),
              count, typeOf(right)}};
    if (rank % 2 == 1) std::reverse(ops.begin(), ops.end());
    const Status st = c->sendRecvGroupAsync(ops, s)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (const P2pOp& op : ops) {
      if (op.kind != P2pOp::Kind::kRecv) continue;
      // The neighbour's message to this rank (at np2 both of the one neighbour's messages hold the same
      // bytes).
      const std::vector<uint8_t> got =
          peer::toHost(static_cast<char*>(op.buffer), count * dataTypeSize(op.dtype));
      EXPECT_TRUE(got == input(op.peer, rank, op.dtype))
          << "pass " << pass << " rank " << rank << " from " << op.peer;
    }
    // All-to-all in one dtype, in rank order on even ranks, reversed on odd ones.
    bufs.clear();
    std::vector<P2pOp> all;
    for (int p = 0; p < n; ++p) {
      all.push_back(
          P2pOp{P2pOp::Kind::kSend, p, device(input(rank, p, DataType::kInt32)), count, DataType::kInt32});
      all.push_back(
          P2pOp{P2pOp::Kind::kRecv, p, device(std::vector<uint8_t>(count * 4)), count, DataType::kInt32});
    }
    if (rank % 2 == 1) std::reverse(all.begin(), all.end());
    const Status st2 = c->sendRecvGroupAsync(all, s)->wait();
    ASSERT_TRUE(st2.isOk()) << st2.toString();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (const P2pOp& op : all) {
      if (op.kind != P2pOp::Kind::kRecv) continue;
      EXPECT_TRUE(peer::toHost(static_cast<char*>(op.buffer), count * 4) ==
                  input(op.peer, rank, DataType::kInt32))
          << "alltoall pass " << pass << " rank " << rank << " from " << op.peer;
    }
  }
  const Counters k = c->counters();
  EXPECT_GT(k.injected, 0u);
  EXPECT_EQ(k.detected, k.injected);

  // 16 f32 sent, 16 i32 expected (the same bytes): both ends fail on the fingerprint.
  if (rank <= 1) {
    peer::DeviceBuffer buf(64);
    const P2pOp op = rank == 0 ? P2pOp{P2pOp::Kind::kSend, 1, buf.get(), 16, DataType::kFloat32}
                               : P2pOp{P2pOp::Kind::kRecv, 0, buf.get(), 16, DataType::kInt32};
    std::shared_ptr<Work> w = c->sendRecvGroupAsync({op}, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const Status st = w->wait();
    EXPECT_EQ(st.code(), StatusCode::kFingerprintMismatch) << st.toString();
  }
}

}  // namespace
}  // namespace ringguard
