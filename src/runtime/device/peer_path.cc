#include "runtime/device/peer_path.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "algorithms/collectives.h"
#include "core/call_clock.h"
#include "core/fingerprint.h"
#include "core/function_ref.h"
#include "core/logging.h"
#include "core/peer_alltoall_plan.h"
#include "core/peer_p2p_plan.h"
#include "core/trace_events.h"
#include "cuda/cuda_check.h"
#include "cuda/peer/peer_collectives.h"
#include "runtime/device/stream_chain.h"
#include "transport/peer/peer_liveness.h"
#include "transport/peer/peer_window.h"

namespace ringguard {
namespace cuda {
namespace {

using peer::ErrorRecord;
using peer::PeerError;

const char* errorName(uint32_t code) {
  switch (PeerError(code)) {
    case PeerError::kTimeout:
      return "timed out";
    case PeerError::kFingerprintMismatch:
      return "fingerprint mismatch";
    case PeerError::kCorrupt:
      return "corrupt on every re-read";
    case PeerError::kPeerFailed:
      return "a peer failed";
    case PeerError::kAborted:
      return "aborted";
    case PeerError::kSplitMismatch:
      return "all-to-all splits disagree";
    case PeerError::kBlockTable:
      return "all-to-all block outside its window";
    case PeerError::kMessageMismatch:
      return "send/recv counts disagree";
    case PeerError::kPeerExited:
      return "waited for a rank whose process exited";
    default:
      return "unknown error";
  }
}

StatusCode statusCode(uint32_t code) {
  switch (PeerError(code)) {
    case PeerError::kTimeout:
      return StatusCode::kTimeout;
    case PeerError::kFingerprintMismatch:
    case PeerError::kMessageMismatch:  // as the host path's send/recv, whose fingerprint carries the count
      return StatusCode::kFingerprintMismatch;
    case PeerError::kCorrupt:
      return StatusCode::kCorruption;
    case PeerError::kPeerFailed:
    case PeerError::kPeerExited:
      return StatusCode::kPeerError;
    case PeerError::kAborted:
      return StatusCode::kAborted;
    // As the host ring's "alltoall split mismatch": the callers' arguments, found on every rank.
    case PeerError::kSplitMismatch:
    case PeerError::kBlockTable:
      return StatusCode::kInvalidArgument;
    default:
      return StatusCode::kInternal;
  }
}

// The bytes a call moved as the communicator counts them (Communicator's launchDirect calls), from what its
// fingerprint names: the per-rank count of the all-gather, reduce-scatter and equal all-to-all times the
// ranks; the split all-to-all's fingerprint names no count (0).
uint64_t callBytes(CollectiveKind kind, uint64_t count, uint32_t dtype, size_t ranks) {
  if (dtype > uint32_t(DataType::kComplex128)) return 0;  // no dtype of ours
  const uint64_t bytes = count * dataTypeSize(DataType(dtype));
  const bool perRank = kind == CollectiveKind::kAllgather || kind == CollectiveKind::kReduceScatter ||
                       kind == CollectiveKind::kAlltoall;
  return perRank ? bytes * ranks : bytes;
}

class PeerPath final : public DirectPath {
 public:
  PeerPath(std::unique_ptr<peer::PeerWindows> windows, const PeerPathOptions& peer, const Options& options)
      : windows_(std::move(windows)), liveness_(windows_->pids()), peer_(peer), options_(options) {
    startClocks();
  }

  ~PeerPath() override {
    windows_.reset();  // waits for the device (PeerWindows::release) before the ring the kernels write goes
    if (clocks_ != nullptr) cudaFreeHost(clocks_);
  }

  const char* name() const override { return "peer"; }

  bool acceptsAllreduce(size_t count, DataType dtype, ReduceOp op) const override {
    return reduceSupported(dtype, op) && takes(CollectiveKind::kAllreduce, count * dataTypeSize(dtype));
  }

  Status allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, uint32_t lane,
                   void* stream) override {
    peer::PeerAllreduceArgs a;
    fill(&a, CollectiveKind::kAllreduce, count, dtype, op, 0, lane);
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    a.algorithm = peer::chooseAllreduce(count * dataTypeSize(dtype), a.size, peer_.twoShotBytes);
    a.arriveFirst = arrivesFirst(count * dataTypeSize(dtype));
    return ordered(stream,
                   [&] { return timed(a, stream, [&] { return peer::launchPeerAllreduce(a, stream); }); });
  }

  bool acceptsAllgather(size_t sendCount, DataType dtype) const override {
    return takes(CollectiveKind::kAllgather, sendCount * dataTypeSize(dtype));
  }

  Status allgather(const void* send, void* recv, size_t sendCount, DataType dtype, uint32_t lane,
                   void* stream) override {
    peer::PeerAllgatherArgs a;
    fill(&a, CollectiveKind::kAllgather, sendCount, dtype, ReduceOp::kSum, 0, lane);
    a.send = send;
    a.recv = recv;
    a.count = sendCount;
    a.dtype = dtype;
    a.arriveFirst = arrivesFirst(sendCount * dataTypeSize(dtype));
    return ordered(stream,
                   [&] { return timed(a, stream, [&] { return peer::launchPeerAllgather(a, stream); }); });
  }

  bool acceptsBroadcast(size_t count, DataType dtype) const override {
    return takes(CollectiveKind::kBroadcast, count * dataTypeSize(dtype));
  }

  Status broadcast(const void* send, void* recv, size_t count, DataType dtype, int root, uint32_t lane,
                   void* stream) override {
    peer::PeerBroadcastArgs a;
    fill(&a, CollectiveKind::kBroadcast, count, dtype, ReduceOp::kSum, root, lane);
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = dtype;
    a.root = root;
    a.arriveFirst = arrivesFirst(count * dataTypeSize(dtype));
    return ordered(stream,
                   [&] { return timed(a, stream, [&] { return peer::launchPeerBroadcast(a, stream); }); });
  }

  bool acceptsReduceScatter(size_t recvCount, DataType dtype, ReduceOp op) const override {
    return reduceSupported(dtype, op) &&
           takes(CollectiveKind::kReduceScatter, recvCount * dataTypeSize(dtype) * size_t(windows_->size()));
  }

  Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                       uint32_t lane, void* stream) override {
    peer::PeerReduceScatterArgs a;
    const size_t n = size_t(windows_->size());
    fill(&a, CollectiveKind::kReduceScatter, recvCount, dtype, op, 0, lane);
    a.send = send;
    a.recv = recv;
    a.count = recvCount;
    a.dtype = dtype;
    a.op = op;
    a.arriveFirst = arrivesFirst(recvCount * dataTypeSize(dtype) * n);
    return ordered(
        stream, [&] { return timed(a, stream, [&] { return peer::launchPeerReduceScatter(a, stream); }); });
  }

  // The equal form publishes N - 1 blocks of `count`; the split form its table (its blocks differ per rank
  // and are checked against the window by every rank's kernel, kBlockTable).
  bool acceptsAlltoall(size_t count, DataType dtype, bool splits) const override {
    if (splits && !peer_.splitAlltoall) return false;
    const uint64_t blocks =
        peer::chunkCount64(uint64_t(count) * dataTypeSize(dtype)) * uint64_t(windows_->size() - 1);
    const size_t published = splits                                  ? peer::kChunkBytes
                             : blocks > windows_->layout().maxChunks ? windows_->layout().capacity + 1
                                                                     : size_t(blocks) * peer::kChunkBytes;
    return takes(CollectiveKind::kAlltoall, published);
  }

  Status alltoall(const void* send, void* recv, const AlltoallLayout& layout, DataType dtype, bool splits,
                  uint32_t lane, void* stream) override {
    const size_t n = size_t(windows_->size());
    if (layout.sendCounts.size() != n || layout.sendDispls.size() != n || layout.recvCounts.size() != n ||
        layout.recvDispls.size() != n) {
      return Status(StatusCode::kInvalidArgument,
                    "peer alltoall: split vectors need " + std::to_string(n) + " entries");
    }
    peer::PeerAlltoallArgs a;
    // The equal form fingerprints its count; the split form's counts differ per rank, so its fingerprint
    // carries none and the block tables check them (docs/design/protocol.md, "All-to-all").
    fill(&a, CollectiveKind::kAlltoall, splits ? 0 : layout.sendCounts[0], dtype, ReduceOp::kSum, 0, lane);
    a.send = send;
    a.recv = recv;
    for (size_t p = 0; p < n; ++p) {
      a.sendCounts[p] = layout.sendCounts[p];
      a.sendDispls[p] = layout.sendDispls[p];
      a.recvCounts[p] = layout.recvCounts[p];
      a.recvDispls[p] = layout.recvDispls[p];
    }
    a.dtype = dtype;
    a.splits = splits;
    size_t sent = 0;
    for (size_t p = 0; p < n; ++p) sent += layout.sendCounts[p];
    a.arriveFirst = arrivesFirst(sent * dataTypeSize(dtype));
    return ordered(stream,
                   [&] { return timed(a, stream, [&] { return peer::launchPeerAlltoall(a, stream); }); });
  }

  bool acceptsSendRecv(size_t sendCount, int dst, size_t recvCount, int src, DataType dtype) const override {
    return peer::peerPathTakesSendRecv(windows_->size(), windows_->rank(), dst, src,
                                       windows_->layout().p2pBytes);
  }

  bool takesPeerSendRecv() const override {
    const int n = windows_->size();
    return n > 1 && acceptsSendRecv(0, (windows_->rank() + 1) % n, 0, -1, DataType::kUint8);
  }

  Status sendRecv(const void* send, size_t sendCount, int dst, void* recv, size_t recvCount, int src,
                  DataType sendDtype, DataType recvDtype, uint32_t lane, void* stream) override {
    peer::PeerSendRecvArgs a;
    // The dtype, the count and both ends go into each direction's fingerprint in the launcher.
    fill(&a, CollectiveKind::kSendRecv, 0, sendDtype, ReduceOp::kSum, 0, lane);
    a.send = send;
    a.sendCount = dst >= 0 ? sendCount : 0;
    a.dst = dst;
    a.recv = recv;
    a.recvCount = src >= 0 ? recvCount : 0;
    a.src = src;
    a.sendDtype = sendDtype;
    a.recvDtype = recvDtype;
    return ordered(stream, [&] { return peer::launchPeerSendRecv(a, stream); });
  }

  bool declines(CollectiveKind kind) const override {
    // The all-to-all's split form takes the windows only with `peer` asked by name (under auto it runs on
    // the pipeline at every size, so no all-to-all enters the windows' order unless it fits); send/recv has
    // channels of its own.
    if (kind == CollectiveKind::kSendRecv) return false;
    return kind != CollectiveKind::kAlltoall || peer_.splitAlltoall;
  }

  Status decline(CollectiveKind kind, uint32_t lane, void* stream) override {
    peer::PeerWindowArgs a;
    // The call's kind marked invalid-arguments (word 0's second byte: the host's Fingerprint::flags), with
    // the placeholders of the host path's rejected fingerprint: no real call has this fingerprint.
    fill(&a, kind, 0, DataType::kUint8, ReduceOp::kSum, kNoRoot, lane);
    a.fingerprint[0] |= uint32_t(kFingerprintInvalidInput) << 8;
    return ordered(stream, [&] { return peer::launchPeerDecline(a, stream); });
  }

  uint64_t takeFinishedCalls(FunctionRef<void(const DirectCallTime&)> take) override {
    // With the timeline off no clock kernel ever ran (timed()): nothing to read, and each launch, which
    // calls this, pays nothing (the first drain would otherwise scan the ring for an oldest entry).
    if (clocksDevice_ == nullptr || !trace::on()) return 0;
    std::lock_guard<std::mutex> lock(clockMutex_);
    const size_t ranks = size_t(windows_->size());
    return peer::drainCallClocks(clocks_, &nextClock_, clockOffsetNs_, [&](const peer::FinishedCall& c) {
      if ((c.fingerprint >> 8) != 0) return;  // flagged (a decline, a marker): timed() never brackets one
      const auto kind = CollectiveKind(c.fingerprint & 0xffu);
      DirectCallTime t;
      t.name = collectiveKindName(kind);
      t.seq = c.epoch;
      t.startNs = c.startNs;
      t.durNs = c.durNs;
      t.bytes = callBytes(kind, c.count, c.dtype, ranks);
      take(t);
    });
  }

  Status offPath(CollectiveKind kind, size_t count, DataType dtype, ReduceOp op, int root, uint32_t lane,
                 void* stream) override {
    peer::PeerWindowArgs a;
    // The fingerprint the call's own kernel would publish (the caller passes fill's arguments), flagged; the
    // decline kernel publishes it and checks every peer's (decline.cu).
    fill(&a, kind, count, dtype, op, root, lane);
    a.fingerprint[0] |= uint32_t(kFingerprintOffWindows) << 8;
    return ordered(stream, [&] { return peer::launchPeerDecline(a, stream); });
  }

  Status poll() override {
    const volatile ErrorRecord* r = windows_->errorRecord();
    const uint32_t code = r->code;
    if (code == 0) return Status::ok();
    std::string msg = "rank " + std::to_string(windows_->rank()) + ": peer-window collective #" +
                      std::to_string(r->epoch) + " " + errorName(code);
    if (PeerError(code) == PeerError::kSplitMismatch) {
      return Status(statusCode(code), msg + ": rank " + std::to_string(r->peer) + " sends " +
                                          std::to_string(r->seen) + " elements to rank " +
                                          std::to_string(r->chunk) + ", which expects " +
                                          std::to_string(r->expected));
    }
    if (PeerError(code) == PeerError::kBlockTable) {
      return Status(statusCode(code), msg + ": rank " + std::to_string(r->peer) + "'s block for rank " +
                                          std::to_string(r->chunk) + " ends at chunk " +
                                          std::to_string(r->seen) + ", its window holds " +
                                          std::to_string(r->expected) + " (RINGGUARD_PEER_BYTES)");
    }
    if (PeerError(code) == PeerError::kMessageMismatch) {
      // chunk 0: this rank sent; expected is this rank's size, seen the other end's (bytes: the two ends of a
      // grouped call's message may name it in different dtypes, and the kernel compares what moves).
      const bool sent = r->chunk == 0;
      const int me = windows_->rank();
      return Status(statusCode(code), msg + ": rank " + std::to_string(sent ? me : r->peer) + " sends " +
                                          std::to_string(sent ? r->expected : r->seen) + " bytes to rank " +
                                          std::to_string(sent ? r->peer : me) + ", which expects " +
                                          std::to_string(sent ? r->seen : r->expected) + " bytes");
    }
    if (PeerError(code) == PeerError::kPeerExited) {
      return Status(statusCode(code), msg + ": rank " + std::to_string(r->peer) +
                                          "'s process is gone (it exited or was killed before it reached "
                                          "this collective or finished it)");
    }
    if (PeerError(code) == PeerError::kFingerprintMismatch && r->fingerprintsKnown != 0 && r->peer >= 0) {
      // Both collectives, as the host path names them (core/fingerprint.h), the words of PeerPath::fill.
      const auto decode = [&](int side) {
        Fingerprint f;
        const volatile uint32_t* w = r->fingerprints[side];
        f.collective = uint8_t(w[0]);
        f.flags = uint8_t(w[0] >> 8);  // PeerPath::decline
        f.dtype = uint8_t(w[1]);
        f.op = uint8_t(w[2]);
        f.count = uint64_t(w[3]) | uint64_t(w[4]) << 32;
        if (CollectiveKind(f.collective) == CollectiveKind::kBroadcast) f.root = int32_t(w[5]);
        f.lane = w[6];
        f.opScalar = w[7];
        f.seq = r->epoch;
        return f;
      };
      const Status both = compareFingerprints(windows_->rank(), decode(0), r->peer, decode(1));
      if (!both.isOk()) return Status(statusCode(code), msg + ": " + both.message());
    }
    if (r->peer >= 0) {
      // No chunk: the wait for the peer's acknowledgement or arrival slot, or a send/recv's rendezvous entry
      // (docs/design/protocol.md).
      msg += " (rank " + std::to_string(r->peer) +
             (r->chunk == ~0u ? std::string(", its acknowledgement, arrival or send/recv rendezvous")
                              : ", chunk " + std::to_string(r->chunk)) +
             ")";
    }
    if (PeerError(code) == PeerError::kFingerprintMismatch || PeerError(code) == PeerError::kCorrupt) {
      msg += ": expected " + std::to_string(r->expected) + ", saw " + std::to_string(r->seen);
    }
    return Status(statusCode(code), msg);
  }

  void faultCounts(uint64_t* detected, uint64_t* injected) override {
    const volatile ErrorRecord* r = windows_->errorRecord();
    *detected = r->detected;
    *injected = r->injected;
  }

  // The watchdog's round: the ranks whose process exited, where the kernels see them (a wait on one ends
  // with kPeerExited instead of at its deadline).
  void watch() override {
    const uint32_t gone = liveness_.exited();
    if (gone != 0) *reinterpret_cast<volatile uint32_t*>(&windows_->errorRecord()->exitedPeers) = gone;
  }

  // The record's word ends the kernels that spin now; the own error word, set on the device
  // (abort_mark.cu), the kernels that start later (one queued behind the replica check's gate, say), which
  // must not publish or read. That mark runs on a stream of its own and is waited for at most 1 s (an abort
  // never hangs, even on a device that does not answer).
  void abort() override {
    *reinterpret_cast<volatile uint32_t*>(&windows_->errorRecord()->abortRequested) = 1;
    cuda_detail::DeviceGuard onDevice(windows_->device());
    if (onDevice.error() != cudaSuccess) return;
    cudaStream_t s = nullptr;
    cudaEvent_t done = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
        peer::launchPeerAbortMark(windows_->window(windows_->rank()), s).isOk() &&
        cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(done, s) == cudaSuccess) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (cudaEventQuery(done) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (done != nullptr) (void)cudaEventDestroy(done);
    if (s != nullptr) (void)cudaStreamDestroy(s);
  }

  static_assert(uint8_t(FaultMode::kBitFlip) == peer::PeerFault::kBitFlip &&
                    uint8_t(FaultMode::kMultiBit) == peer::PeerFault::kMultiBit &&
                    uint8_t(FaultMode::kBurst) == peer::PeerFault::kBurst &&
                    uint8_t(FaultMode::kGarbage) == peer::PeerFault::kGarbage &&
                    uint8_t(FaultMode::kTrailer) == peer::PeerFault::kTrailer &&
                    uint8_t(FaultMode::kRetransmit) == peer::PeerFault::kRetransmit &&
                    uint8_t(FaultMode::kDelay) == peer::PeerFault::kDelay &&
                    uint8_t(FaultMode::kControl) == peer::PeerFault::kControl,
                "core/peer_fault.h's modes are FaultMode's");
  void setFault(const FaultOptions& fault) override {
    peer::PeerFault f;
    f.probability = fault.probability;
    f.seed = uint32_t(fault.seed);
    f.mode = uint8_t(fault.mode);
    f.bits = uint8_t(std::clamp(fault.bits, 1, peer::PeerFault::kMaxFlips));
    f.burstBits = uint8_t(std::clamp(fault.burstBits, 2, 32));
    f.repeat = uint8_t(std::clamp(fault.repeat, 1, 255));
    f.delayNs = uint64_t(std::max(fault.delayMs, 0)) * 1000000ull;
    std::lock_guard<std::mutex> lock(faultMutex_);
    fault_ = f;
  }

 private:
  // Whether a call moving `bytes` per rank waits for its peers in the arrival kernel first: above
  // RINGGUARD_PEER_ARRIVAL_BYTES (cuda/peer/arrival.cu).
  bool arrivesFirst(size_t bytes) const { return bytes > peer_.arrivalBytes; }

  bool takes(CollectiveKind kind, size_t publishedBytes) const {
    return peer::peerPathTakes(kind, publishedBytes, windows_->size(), windows_->layout().capacity);
  }

  // The windows, the record, the settings and the fingerprint every collective's arguments carry.
  void fill(peer::PeerWindowArgs* a, CollectiveKind kind, size_t count, DataType dtype, ReduceOp op, int root,
            uint32_t lane) const {
    a->rank = windows_->rank();
    a->size = windows_->size();
    for (int r = 0; r < a->size; ++r) a->windows[r] = windows_->window(r);
    a->layout = windows_->layout();
    a->record = windows_->errorRecordDevice();
    a->oneDevice = windows_->oneDevice();
    a->fingerprint[0] = uint32_t(kind);
    a->fingerprint[1] = uint32_t(dtype);
    a->fingerprint[2] = uint32_t(baseOp(op));
    a->fingerprint[3] = uint32_t(count);
    a->fingerprint[4] = uint32_t(uint64_t(count) >> 32);
    a->fingerprint[5] = uint32_t(root);
    a->fingerprint[6] = lane;
    const float factor = float(premulFactor(op));  // premul_sum ops differ by their factor
    std::memcpy(&a->fingerprint[7], &factor, sizeof factor);
    a->timeoutNs = uint64_t(options_.timeout.count()) * 1000000ull;
    a->maxRereads = options_.maxRetries;
    std::lock_guard<std::mutex> lock(faultMutex_);
    a->fault = fault_;
  }

  // The timeline's ring (core/call_clock.h) and the clocks' offset, when the device gives both; without them
  // the path's calls have no spans (a warning says why).
  void startClocks() {
    void* ring = nullptr;
    void* device = nullptr;
    int64_t offset = 0;
    const size_t bytes = sizeof(peer::CallClock) * peer::kCallClocks;
    Status st = peer::measureClockOffset(&offset);
    if (st.isOk() && (cudaHostAlloc(&ring, bytes, cudaHostAllocMapped) != cudaSuccess ||
                      cudaHostGetDevicePointer(&device, ring, 0) != cudaSuccess)) {
      st = Status(StatusCode::kInternal, "no mapped pinned memory for the ring");
    }
    if (!st.isOk()) {
      if (ring != nullptr) cudaFreeHost(ring);
      logWarn(Subsys::kRuntime, "rank {}: the peer path's calls will have no timeline spans: {}",
              windows_->rank(), st.toString());
      return;
    }
    std::memset(ring, 0, bytes);
    clocks_ = static_cast<peer::CallClock*>(ring);
    clocksDevice_ = static_cast<peer::CallClock*>(device);
    clockOffsetNs_ = offset;
  }

  // The call's kernels (`launch`), between the timeline's clock kernels while the timeline is on and the
  // ring exists (cuda/peer/call_clock.cu; a graph captured then keeps them and times each replay).
  Status timed(const peer::PeerWindowArgs& a, void* stream, FunctionRef<Status()> launch) {
    if (clocksDevice_ == nullptr || !trace::on()) return launch();
    void* own = windows_->window(windows_->rank());
    RINGGUARD_RETURN_IF_ERROR(peer::launchCallClockBegin(own, stream));
    RINGGUARD_RETURN_IF_ERROR(launch());
    return peer::launchCallClockEnd(own, clocksDevice_, a, stream);
  }

  // A kernel launched after every earlier one of this path, whatever their streams (stream_chain.h).
  Status ordered(void* stream, FunctionRef<Status()> launch) {
    return chain_.run(static_cast<cudaStream_t>(stream), launch);
  }

  std::unique_ptr<peer::PeerWindows> windows_;
  peer::PeerLiveness liveness_;  // the peers' processes, for watch()
  StreamChain chain_;
  PeerPathOptions peer_;
  Options options_;
  mutable std::mutex faultMutex_;  // setFault (any thread) against the launches' copies
  peer::PeerFault fault_;
  peer::CallClock* clocks_ = nullptr;        // the timeline's ring, host address (null: no spans)
  peer::CallClock* clocksDevice_ = nullptr;  // its device address, for the clock kernels
  int64_t clockOffsetNs_ = 0;                // host steady clock = %globaltimer + this
  std::mutex clockMutex_;                    // takeFinishedCalls from any thread
  uint64_t nextClock_ = 0;                   // the next epoch to take (0: not known yet)
};

}  // namespace

Status createPeerPath(Bootstrap& bootstrap, int device, const PeerPathOptions& peer, const Options& options,
                      std::unique_ptr<DirectPath>* out) {
  // Before any kernel of the path can run (cuda/peer/kernel_preload.h). A failure is this rank's alone:
  // agreed, so that no rank goes on into the windows' steps without the others.
  RINGGUARD_RETURN_IF_ERROR(agreeToProceed(bootstrap, peer::preloadPeerKernels()));
  std::unique_ptr<peer::PeerWindows> windows;
  // The send/recv channels cost 2 (N - 1) slots of `p2pBytes` per rank (0: none).
  RINGGUARD_RETURN_IF_ERROR(
      peer::PeerWindows::create(bootstrap, device, peer.capacity, peer.p2pBytes, peer.handles, &windows));
  *out = std::make_unique<PeerPath>(std::move(windows), peer, options);
  return Status::ok();
}

}  // namespace cuda
}  // namespace ringguard
