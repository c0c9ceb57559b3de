#include "transport/nccl/nccl_transport.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "cuda/cuda_check.h"

namespace ringguard {

namespace {

Status ncclStatus(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::ok();
  return Status(StatusCode::kTransportError, std::string(call) + " failed at " + file + ":" +
                                                 std::to_string(line) + ": " + ncclGetErrorString(r));
}
#define RINGGUARD_NCCL_CHECK(call) RINGGUARD_RETURN_IF_ERROR(ncclStatus((call), #call, __FILE__, __LINE__))

}  // namespace

// NCCL operations complete in stream order: once its group is launched, everything that waits for the
// group's event (the executor's kernels) or is enqueued later on the communication stream (the next
// groups) runs after it, so the op is done for the algorithm's purposes. Real completion is observed by the
// executor's sync, which polls.
class NcclOp final : public TransportOp {
 public:
  NcclOp(NcclTransport* t, uint64_t flush, std::shared_ptr<void> event)
      : t_(t), flush_(flush), event_(std::move(event)) {}
  Status test(bool* done) override {
    *done = t_->flushes_ >= flush_;
    return Status::ok();
  }
  void cancel() override {}  // a queued NCCL op cannot be withdrawn; ncclCommAbort tears all of them down
  std::shared_ptr<void> streamEvent() const override { return event_; }

 private:
  NcclTransport* t_;
  uint64_t flush_;
  std::shared_ptr<void> event_;
};

Status NcclTransport::newUniqueId(std::vector<uint8_t>* out) {
  ncclUniqueId id;
  RINGGUARD_NCCL_CHECK(ncclGetUniqueId(&id));
  out->assign(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id));
  return Status::ok();
}

namespace {

// Polls a non-blocking communicator until it is ready; kTimeout after `deadline`.
Status waitReady(ncclComm_t nccl, const char* what, std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds timeout, int rank) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    RINGGUARD_NCCL_CHECK(ncclCommGetAsyncError(nccl, &state));
    RINGGUARD_RETURN_IF_ERROR(ncclStatus(state, what, __FILE__, __LINE__));
    if (state == ncclSuccess) return Status::ok();
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(StatusCode::kTimeout, std::string(what) + " timed out after " +
                                              std::to_string(timeout.count()) + " ms on rank " +
                                              std::to_string(rank));
    }
    std::this_thread::yield();
  }
}

}  // namespace

Status NcclTransport::create(const std::vector<uint8_t>& idBytes, std::unique_ptr<Transport> control,
                             cudaStream_t stream, std::chrono::milliseconds timeout, int lanes,
                             std::unique_ptr<Transport>* out) {
  ncclUniqueId id;
  if (idBytes.size() != sizeof(id)) {
    return Status(StatusCode::kInvalidArgument, "NcclTransport: unique id of " +
                                                    std::to_string(idBytes.size()) + " bytes, expected " +
                                                    std::to_string(sizeof(id)));
  }
  std::memcpy(&id, idBytes.data(), sizeof(id));
  if (lanes < 1 || lanes > kMaxLanes) {
    return Status(StatusCode::kInvalidArgument, "NcclTransport: " + std::to_string(lanes) +
                                                    " lanes, expected 1 to " + std::to_string(kMaxLanes));
  }
  // Everything made so far is released by a later failure.
  std::vector<Lane> made;
  made.reserve(size_t(lanes));  // NCCL writes a split's child into made[l].comm from a thread of its own
  cudaEvent_t mark = nullptr;
  auto release = [&] {
    for (Lane& l : made) {
      if (l.comm != nullptr) ncclCommAbort(l.comm);
      if (l.stream != nullptr) cudaStreamDestroy(l.stream);
    }
    if (mark != nullptr) cudaEventDestroy(mark);
  };
  auto fail = [&](Status st) {
    release();
    return st;
  };
  if (cudaError_t err = cudaEventCreateWithFlags(&mark, cudaEventDisableTiming); err != cudaSuccess) {
    return cuda_detail::cudaErrorStatus(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
  }
  // The highest priority: NCCL's few blocks get SMs ahead of the executor's wide kernels.
  int leastPriority = 0, greatestPriority = 0;
  if (cudaError_t err = cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority);
      err != cudaSuccess) {
    return fail(cuda_detail::cudaErrorStatus(err, "cudaDeviceGetStreamPriorityRange", __FILE__, __LINE__));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int l = 0; l < lanes; ++l) {
    made.emplace_back();
    Lane& lane = made.back();
    if (cudaError_t err = cudaStreamCreateWithPriority(&lane.stream, cudaStreamNonBlocking, greatestPriority);
        err != cudaSuccess) {
      lane.stream = nullptr;
      return fail(cuda_detail::cudaErrorStatus(err, "cudaStreamCreateWithPriority", __FILE__, __LINE__));
    }
    // Lane 0 from the unique id; the others split from it (collective over the same ranks, same order).
    const char* what = l == 0 ? "NCCL communicator initialisation" : "NCCL lane communicator split";
    Status st =
        l == 0 ? ncclStatus(ncclCommInitRankConfig(&lane.comm, control->size(), id, control->rank(), &config),
                            "ncclCommInitRankConfig", __FILE__, __LINE__)
               : ncclStatus(ncclCommSplit(made[0].comm, 0, control->rank(), &lane.comm, &config),
                            "ncclCommSplit", __FILE__, __LINE__);
    // A non-blocking split reports its progress on the parent and sets the child when it is done.
    if (st.isOk() && l > 0) st = waitReady(made[0].comm, what, deadline, timeout, control->rank());
    if (st.isOk() && lane.comm == nullptr) {
      st = Status(StatusCode::kTransportError, std::string(what) + ": NCCL made no communicator");
    }
    if (st.isOk()) st = waitReady(lane.comm, what, deadline, timeout, control->rank());
    if (!st.isOk()) return fail(st);
  }
  out->reset(new NcclTransport(std::move(control), std::move(made), stream, mark, timeout));
  return Status::ok();
}

NcclTransport::NcclTransport(std::unique_ptr<Transport> control, std::vector<Lane> lanes,
                             cudaStream_t compute, cudaEvent_t computeMark, std::chrono::milliseconds timeout)
    : Transport(control->rank(), control->size()),
      control_(std::move(control)),
      lanes_(std::move(lanes)),
      compute_(compute),
      computeMark_(computeMark),
      timeout_(timeout),
      sendsPosted_(2 * size_t(size()), 0),
      recvsPosted_(2 * size_t(size()), 0) {}

NcclTransport::~NcclTransport() {
  closeComms();
  // Not blocking: a stream is released once its queued work (aborted or finished) is gone.
  cudaEventDestroy(computeMark_);
  for (Lane& l : lanes_) cudaStreamDestroy(l.stream);
}

void NcclTransport::closeComms() {
  if (aborted_) return;
  if (groupOpen_) ncclGroupEnd();
  // Finalize flushes what is queued; poll it with the timeout, and abort instead of hanging.
  for (Lane& l : lanes_) ncclCommFinalize(l.comm);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (Lane& l : lanes_) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      ncclCommGetAsyncError(l.comm, &state);
      std::this_thread::yield();
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(l.comm);
    } else {
      ncclCommAbort(l.comm);
    }
  }
}

Status NcclTransport::nextLane(std::vector<uint64_t>& posted, int peer, Channel channel, Lane** lane) {
  if (peer < 0 || peer >= size()) {
    return Status(StatusCode::kInvalidArgument,
                  "NcclTransport: peer " + std::to_string(peer) + " out of range");
  }
  uint64_t& count = posted[2 * size_t(peer) + (channel == Channel::kPayload ? 0 : 1)];
  Lane& l = lanes_[count++ % lanes_.size()];
  if (!l.event) {
    cudaEvent_t event = nullptr;
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    // Destroying an event whose record is still pending is fine: the driver releases it afterwards.
    l.event = std::shared_ptr<void>(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  }
  if (!groupOpen_) {
    RINGGUARD_NCCL_CHECK(ncclGroupStart());
    groupOpen_ = true;
  }
  *lane = &l;
  return Status::ok();
}

Status NcclTransport::doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                                 std::unique_ptr<TransportOp>* out) {
  Lane* lane = nullptr;
  RINGGUARD_RETURN_IF_ERROR(nextLane(sendsPosted_, peer, channel, &lane));
  if (bytes) RINGGUARD_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, peer, lane->comm, lane->stream));
  out->reset(new NcclOp(this, flushes_ + 1, lane->event));
  return Status::ok();
}

Status NcclTransport::doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                                 std::unique_ptr<TransportOp>* out) {
  Lane* lane = nullptr;
  RINGGUARD_RETURN_IF_ERROR(nextLane(recvsPosted_, peer, channel, &lane));
  if (bytes) RINGGUARD_NCCL_CHECK(ncclRecv(data, bytes, ncclUint8, peer, lane->comm, lane->stream));
  out->reset(new NcclOp(this, flushes_ + 1, lane->event));
  return Status::ok();
}

Status NcclTransport::asyncError(const char* what) {
  for (Lane& l : lanes_) {
    ncclResult_t state = ncclSuccess;
    RINGGUARD_NCCL_CHECK(ncclCommGetAsyncError(l.comm, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Status(StatusCode::kTransportError,
                    std::string("NCCL ") + what + ": " + ncclGetErrorString(state));
    }
  }
  return Status::ok();
}

Status NcclTransport::doFlush() {
  if (!groupOpen_) return Status::ok();
  groupOpen_ = false;
  // The group's transfers read what the executor's stream wrote so far (payloads, trailers) and overwrite
  // slots whose previous contents it has applied by now: order them after all of it.
  cudaError_t ordered = cudaEventRecord(computeMark_, compute_);
  for (Lane& l : lanes_) {
    if (l.event && ordered == cudaSuccess) ordered = cudaStreamWaitEvent(l.stream, computeMark_, 0);
  }
  RINGGUARD_NCCL_CHECK(ncclGroupEnd());  // ends the group even when ordering failed
  if (ordered != cudaSuccess) {
    return cuda_detail::cudaErrorStatus(ordered, "ordering the NCCL group after the executor's stream",
                                        __FILE__, __LINE__);
  }
  // Non-blocking: the group may still be being enqueued; wait for that (not for the transfers).
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (Lane& l : lanes_) {
    if (!l.event) continue;
    Status st = waitReady(l.comm, "NCCL group launch", deadline, timeout_, rank());
    if (!st.isOk()) return st;
    RINGGUARD_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(l.event.get()), l.stream));
    l.event.reset();
  }
  ++flushes_;
  return Status::ok();
}

Status NcclTransport::doProgress() { return asyncError("communicator error"); }

void NcclTransport::doAbort() {
  if (aborted_) return;
  aborted_ = true;
  // Unblocks every queued operation so the streams (and our sync) can finish. One thread per lane: an abort
  // with work in flight takes a while, and the caller's error waits for all of them.
  std::vector<std::thread> aborts;
  for (Lane& l : lanes_) aborts.emplace_back([comm = l.comm] { ncclCommAbort(comm); });
  for (std::thread& t : aborts) t.join();
  control_->markBroken();
}

}  // namespace ringguard
