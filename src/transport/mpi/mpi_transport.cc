#include "transport/mpi/mpi_transport.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <string>
#include <thread>

#include "ringguard/core/log.h"
#include "transport/mpi/mpi_check.h"

namespace ringguard {

namespace {

constexpr int kTagPayload = 1;
constexpr int kTagTrailer = 2;

// How long a cancelled receive may take to complete. One that MPI matched (part of a rendezvous message
// arrived) cannot be withdrawn; it completes only when its sender makes progress again, which a stopped or
// departed peer never does. MPI_Wait would hang forever there, so the wait is bounded, and once one
// receive of a transport has been abandoned the rest are not waited for at all.
constexpr std::chrono::milliseconds kCancelWait(1000);

class MpiOp final : public TransportOp {
 public:
  MpiOp(MPI_Request r, bool isRecv, int rank, int peer, std::shared_ptr<std::atomic<bool>> stuck)
      : request_(r), isRecv_(isRecv), rank_(rank), peer_(peer), stuck_(std::move(stuck)) {}
  ~MpiOp() override { cancel(); }

  Status test(bool* done) override {
    if (request_ == MPI_REQUEST_NULL) {
      *done = true;
      return Status::ok();
    }
    int flag = 0;
    RINGGUARD_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    *done = flag != 0;
    return Status::ok();
  }

  void cancel() override {
    if (request_ == MPI_REQUEST_NULL) return;
    if (isRecv_) {
      // An unmatched receive is withdrawn at once; a matched one completes with the data in flight, if its
      // sender is still making progress.
      MPI_Cancel(&request_);
      const auto deadline =
          std::chrono::steady_clock::now() + (stuck_->load() ? std::chrono::milliseconds(0) : kCancelWait);
      int flag = 0;
      while (MPI_Test(&request_, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (!flag) {
        if (!stuck_->exchange(true)) {
          logger()->warn(
              "rank {}: a receive from rank {} could not be cancelled within {} ms (the peer stopped or left "
              "in the middle of a message): abandoned, with the rest of this transport's receives; their "
              "buffers may still be written if that peer resumes",
              rank_, peer_, kCancelWait.count());
        }
        MPI_Request_free(&request_);
      }
    } else {
      MPI_Request_free(&request_);  // the send may finish in the background; nothing waits for it
    }
    request_ = MPI_REQUEST_NULL;
  }

 private:
  MPI_Request request_;
  bool isRecv_;
  int rank_;
  int peer_;
  std::shared_ptr<std::atomic<bool>> stuck_;  // shared by the transport's ops; outlives the transport
};

Status checkSize(size_t bytes, const char* what) {
  if (bytes > size_t(INT_MAX)) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + ": " + std::to_string(bytes) + " bytes exceed MPI's int count");
  }
  return Status::ok();
}

}  // namespace

Status MpiTransport::create(MPI_Comm comm, std::unique_ptr<Transport>* out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return Status(StatusCode::kInvalidArgument, "MpiTransport: MPI is not initialised");
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  RINGGUARD_MPI_CHECK(MPI_Comm_dup(comm, &data));
  RINGGUARD_MPI_CHECK(MPI_Comm_dup(comm, &control));
  RINGGUARD_MPI_CHECK(MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN));
  RINGGUARD_MPI_CHECK(MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN));
  int rank = 0, size = 0;
  RINGGUARD_MPI_CHECK(MPI_Comm_rank(data, &rank));
  RINGGUARD_MPI_CHECK(MPI_Comm_size(data, &size));
  out->reset(new MpiTransport(rank, size, data, control));
  return Status::ok();
}

MpiControlChannel::~MpiControlChannel() {
  // Give small control messages (errors, verdicts) a moment to leave; never block on a dead peer.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (!sends_.empty() && std::chrono::steady_clock::now() < deadline) {
    reapSends();
    std::this_thread::yield();
  }
  for (PendingSend& p : sends_) {
    MPI_Request_free(&p.request);
    // The buffer must outlive a send MPI may still be making: leak it rather than free it under MPI.
    new std::vector<uint8_t>(std::move(p.buffer));
  }
}

void MpiControlChannel::reapSends() {
  while (!sends_.empty()) {
    int flag = 0;
    MPI_Test(&sends_.front().request, &flag, MPI_STATUS_IGNORE);
    if (!flag) return;
    sends_.pop_front();
  }
}

Status MpiControlChannel::doSend(int peer, ControlTag tag, const void* frame, size_t bytes) {
  RINGGUARD_RETURN_IF_ERROR(checkSize(bytes, "MpiTransport control send"));
  reapSends();
  PendingSend p;
  p.buffer.assign(static_cast<const uint8_t*>(frame), static_cast<const uint8_t*>(frame) + bytes);
  RINGGUARD_MPI_CHECK(MPI_Isend(p.buffer.data(), int(bytes), MPI_BYTE, peer, int(tag), comm_, &p.request));
  sends_.push_back(std::move(p));
  return Status::ok();
}

Status MpiControlChannel::doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from,
                                  bool* got) {
  reapSends();
  int flag = 0;
  MPI_Message handle;
  MPI_Status st;
  RINGGUARD_MPI_CHECK(MPI_Improbe(peer < 0 ? MPI_ANY_SOURCE : peer, int(tag), comm_, &flag, &handle, &st));
  *got = flag != 0;
  if (!flag) return Status::ok();
  int count = 0;
  RINGGUARD_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
  frame->resize(size_t(count));
  RINGGUARD_MPI_CHECK(MPI_Mrecv(frame->data(), count, MPI_BYTE, &handle, MPI_STATUS_IGNORE));
  *from = st.MPI_SOURCE;
  return Status::ok();
}

MpiTransport::MpiTransport(int rank, int size, MPI_Comm data, MPI_Comm control)
    : Transport(rank, size),
      data_(data),
      controlComm_(control),
      control_(std::make_unique<MpiControlChannel>(rank, size, control)) {}

MpiTransport::~MpiTransport() {
  control_.reset();  // its sends in flight first, while the communicator exists
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A freed communicator's context id is reused by the next MPI_Comm_dup, and messages still in flight
  // on it would match there: after a fatal error the duplicates are deliberately not freed.
  if (!finalized && !broken()) {
    MPI_Comm_free(&data_);
    MPI_Comm_free(&controlComm_);
  }
}

Status MpiTransport::doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                                std::unique_ptr<TransportOp>* out) {
  RINGGUARD_RETURN_IF_ERROR(checkSize(bytes, "MpiTransport send"));
  MPI_Request r = MPI_REQUEST_NULL;
  RINGGUARD_MPI_CHECK(MPI_Isend(data, int(bytes), MPI_BYTE, peer,
                                channel == Channel::kPayload ? kTagPayload : kTagTrailer, data_, &r));
  out->reset(new MpiOp(r, false, rank(), peer, cancelStuck_));
  return Status::ok();
}

Status MpiTransport::doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                                std::unique_ptr<TransportOp>* out) {
  RINGGUARD_RETURN_IF_ERROR(checkSize(bytes, "MpiTransport recv"));
  MPI_Request r = MPI_REQUEST_NULL;
  RINGGUARD_MPI_CHECK(MPI_Irecv(data, int(bytes), MPI_BYTE, peer,
                                channel == Channel::kPayload ? kTagPayload : kTagTrailer, data_, &r));
  out->reset(new MpiOp(r, true, rank(), peer, cancelStuck_));
  return Status::ok();
}

}  // namespace ringguard
