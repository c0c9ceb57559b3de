#include "transport/nccl/nccl_transport.h"

#include <chrono>
#include <string>
#include <thread>

#include "cuda/cuda_check.h"
#include "transport/mpi/mpi_check.h"
#include "transport/mpi/mpi_transport.h"

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

Status NcclTransport::create(MPI_Comm comm, cudaStream_t stream, std::chrono::milliseconds timeout,
                             std::unique_ptr<Transport>* out) {
  std::unique_ptr<Transport> control;
  RINGGUARD_RETURN_IF_ERROR(MpiTransport::create(comm, &control));
  ncclUniqueId id;
  if (control->rank() == 0) RINGGUARD_NCCL_CHECK(ncclGetUniqueId(&id));
  RINGGUARD_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
  return create(id, std::move(control), stream, timeout, out);
}

Status NcclTransport::create(const ncclUniqueId& id, std::unique_ptr<Transport> control, cudaStream_t stream,
                             std::chrono::milliseconds timeout, std::unique_ptr<Transport>* out) {
  // Our stream and the mark first; each later failure releases what was made before it.
  cudaStream_t ours = nullptr;
  cudaEvent_t mark = nullptr;
  // The highest priority: NCCL's few blocks get SMs ahead of the executor's wide kernels.
  int leastPriority = 0, greatestPriority = 0;
  RINGGUARD_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority));
  RINGGUARD_CUDA_CHECK(cudaStreamCreateWithPriority(&ours, cudaStreamNonBlocking, greatestPriority));
  auto release = [&] {
    if (mark != nullptr) cudaEventDestroy(mark);
    cudaStreamDestroy(ours);
  };
  if (cudaError_t err = cudaEventCreateWithFlags(&mark, cudaEventDisableTiming); err != cudaSuccess) {
    release();
    return cuda_detail::cudaErrorStatus(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nccl = nullptr;
  Status st = ncclStatus(ncclCommInitRankConfig(&nccl, control->size(), id, control->rank(), &config),
                         "ncclCommInitRankConfig", __FILE__, __LINE__);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (st.isOk()) {
    ncclResult_t state = ncclInProgress;
    st = ncclStatus(ncclCommGetAsyncError(nccl, &state), "ncclCommGetAsyncError", __FILE__, __LINE__);
    if (st.isOk()) st = ncclStatus(state, "ncclCommInitRankConfig", __FILE__, __LINE__);
    if (!st.isOk() || state == ncclSuccess) break;
    if (std::chrono::steady_clock::now() > deadline) {
      st = Status(StatusCode::kTimeout, "NCCL communicator initialisation timed out after " +
                                            std::to_string(timeout.count()) + " ms on rank " +
                                            std::to_string(control->rank()));
    }
    std::this_thread::yield();
  }
  if (!st.isOk()) {
    if (nccl != nullptr) ncclCommAbort(nccl);
    release();
    return st;
  }
  out->reset(new NcclTransport(std::move(control), nccl, stream, ours, mark, timeout));
  return Status::ok();
}

NcclTransport::NcclTransport(std::unique_ptr<Transport> control, ncclComm_t comm, cudaStream_t compute,
                             cudaStream_t stream, cudaEvent_t computeMark, std::chrono::milliseconds timeout)
    : Transport(control->rank(), control->size()),
      control_(std::move(control)),
      comm_(comm),
      compute_(compute),
      stream_(stream),
      computeMark_(computeMark),
      timeout_(timeout) {}

NcclTransport::~NcclTransport() {
  closeComm();
  // Not blocking: the stream is released once its queued work (aborted or finished) is gone.
  cudaEventDestroy(computeMark_);
  cudaStreamDestroy(stream_);
}

void NcclTransport::closeComm() {
  if (aborted_) return;
  if (groupOpen_) ncclGroupEnd();
  // Finalize flushes what is queued; poll it with the timeout, and abort instead of hanging.
  ncclCommFinalize(comm_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    ncclCommGetAsyncError(comm_, &state);
    std::this_thread::yield();
  }
  if (state == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
}

Status NcclTransport::openGroup() {
  if (!groupOpen_) {
    cudaEvent_t event = nullptr;
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    // Destroying an event whose record is still pending is fine: the driver releases it afterwards.
    groupEvent_ =
        std::shared_ptr<void>(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
    RINGGUARD_NCCL_CHECK(ncclGroupStart());
    groupOpen_ = true;
  }
  return Status::ok();
}

Status NcclTransport::doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                                 std::unique_ptr<TransportOp>* out) {
  RINGGUARD_RETURN_IF_ERROR(openGroup());
  if (bytes) RINGGUARD_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, peer, comm_, stream_));
  out->reset(new NcclOp(this, flushes_ + 1, groupEvent_));
  return Status::ok();
}

Status NcclTransport::doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                                 std::unique_ptr<TransportOp>* out) {
  RINGGUARD_RETURN_IF_ERROR(openGroup());
  if (bytes) RINGGUARD_NCCL_CHECK(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream_));
  out->reset(new NcclOp(this, flushes_ + 1, groupEvent_));
  return Status::ok();
}

Status NcclTransport::asyncError(const char* what) {
  ncclResult_t state = ncclSuccess;
  RINGGUARD_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
  if (state != ncclSuccess && state != ncclInProgress) {
    return Status(StatusCode::kTransportError,
                  std::string("NCCL ") + what + ": " + ncclGetErrorString(state));
  }
  return Status::ok();
}

Status NcclTransport::doFlush() {
  if (!groupOpen_) return Status::ok();
  groupOpen_ = false;
  // The group's transfers read what the executor's stream wrote so far (payloads, trailers) and overwrite
  // slots whose previous contents it has applied by now: order them after all of it.
  cudaError_t ordered = cudaEventRecord(computeMark_, compute_);
  if (ordered == cudaSuccess) ordered = cudaStreamWaitEvent(stream_, computeMark_, 0);
  RINGGUARD_NCCL_CHECK(ncclGroupEnd());  // ends the group even when ordering failed
  if (ordered != cudaSuccess) {
    return cuda_detail::cudaErrorStatus(ordered, "ordering the NCCL group after the executor's stream",
                                        __FILE__, __LINE__);
  }
  // Non-blocking: the group may still be being enqueued; wait for that (not for the transfers).
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    RINGGUARD_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state == ncclSuccess) break;
    RINGGUARD_RETURN_IF_ERROR(ncclStatus(state, "ncclGroupEnd", __FILE__, __LINE__));
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(StatusCode::kTimeout, "NCCL group launch timed out on rank " + std::to_string(rank()));
    }
    std::this_thread::yield();
  }
  RINGGUARD_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(groupEvent_.get()), stream_));
  groupEvent_.reset();
  ++flushes_;
  return Status::ok();
}

Status NcclTransport::doProgress() { return asyncError("communicator error"); }

void NcclTransport::doAbort() {
  if (aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);  // unblocks every queued operation so the stream (and our sync) can finish
  control_->markBroken();
}

}  // namespace ringguard
