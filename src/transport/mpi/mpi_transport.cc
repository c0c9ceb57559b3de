#include "transport/mpi/mpi_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "core/keep_alive.h"
#include "core/logging.h"
#include "transport/mpi/mpi_check.h"

namespace ringguard {

namespace {

constexpr int kTagPayload = 1;
constexpr int kTagTrailer = 2;
constexpr int kTagPackedFrame = 3;

// How long a cancelled receive may take to complete. One that MPI matched (part of a rendezvous message
// arrived) cannot be withdrawn; it completes only when its sender makes progress again, which a stopped or
// departed peer never does. MPI_Wait would hang forever there, so the wait is bounded, and once one
// receive of a transport has been abandoned the rest are not waited for at all.
constexpr std::chrono::milliseconds kCancelWait(1000);

std::atomic<bool> gLeftInFlight{false};
std::mutex gLeftInFlightMutex;
std::string gLeftInFlightWhy;  // the first one, guarded by gLeftInFlightMutex
std::atomic<bool> gPeerStalled{false};
std::string gPeerStalledWhy;  // the first one, guarded by gLeftInFlightMutex

class MpiOp final : public TransportOp {
 public:
  MpiOp(MPI_Request r, bool isRecv, int rank, int peer, std::shared_ptr<std::atomic<bool>> stuck)
      : request_(r), isRecv_(isRecv), rank_(rank), peer_(peer), stuck_(std::move(stuck)) {}
  ~MpiOp() override { cancel(); }

  // A packed frame (MpiTransport::kPackedFrameBytes): the op owns the message buffer; a receive copies it
  // out to `payload` and `trailer` when it completes.
  void setPacked(std::vector<uint8_t> buffer, void* payload, size_t bytes, Trailer* trailer) {
    packed_ = std::move(buffer);
    payload_ = payload;
    bytes_ = bytes;
    trailer_ = trailer;
  }

  Status test(bool* done) override {
    if (request_ == MPI_REQUEST_NULL) {
      *done = true;
      return Status::ok();
    }
    int flag = 0;
    MPI_Status status;
    RINGGUARD_MPI_CHECK(MPI_Test(&request_, &flag, &status));
    *done = flag != 0;
    if (flag && isRecv_ && !packed_.empty()) {
      int count = 0;
      RINGGUARD_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
      if (size_t(count) != packed_.size()) {
        return Status(StatusCode::kTransportError, "rank " + std::to_string(rank_) + ": a frame of " +
                                                       std::to_string(count) + " bytes from rank " +
                                                       std::to_string(peer_) + " where " +
                                                       std::to_string(packed_.size()) + " were expected");
      }
      if (bytes_ != 0) std::memcpy(payload_, packed_.data(), bytes_);
      std::memcpy(trailer_, packed_.data() + bytes_, sizeof(Trailer));
    }
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
          logWarn(
              Subsys::kTransport,
              "rank {}: a receive from rank {} could not be cancelled within {} ms (the peer stopped or left "
              "in the middle of a message): abandoned, with the rest of this transport's receives; their "
              "buffers may still be written if that peer resumes",
              rank_, peer_, kCancelWait.count());
        }
        MPI_Request_free(&request_);
        keepAlive();
        noteMpiRequestLeftInFlight("rank " + std::to_string(rank_) + ": a receive from rank " +
                                   std::to_string(peer_) + " could not be cancelled");
      }
    } else {
      int done = 0;
      MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Request_free(&request_);  // the send may finish in the background; nothing waits for it
        keepAlive();
        noteMpiRequestLeftInFlight("rank " + std::to_string(rank_) + ": a send to rank " +
                                   std::to_string(peer_) + " was released before it completed");
      }
    }
    request_ = MPI_REQUEST_NULL;
  }

 private:
  // MPI may still read or write a released request's buffer: kept, never freed under MPI.
  void keepAlive() {
    if (!packed_.empty()) keepUntilExit(std::make_unique<std::vector<uint8_t>>(std::move(packed_)));
  }

  MPI_Request request_;
  bool isRecv_;
  int rank_;
  int peer_;
  std::shared_ptr<std::atomic<bool>> stuck_;  // shared by the transport's ops; outlives the transport
  std::vector<uint8_t> packed_;
  void* payload_ = nullptr;
  size_t bytes_ = 0;
  Trailer* trailer_ = nullptr;
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

bool mpiRequestsLeftInFlight(std::string* why) {
  if (!gLeftInFlight.load()) return false;
  if (why != nullptr) {
    std::lock_guard<std::mutex> lock(gLeftInFlightMutex);
    *why = gLeftInFlightWhy;
  }
  return true;
}

bool mpiPeerStalled(std::string* why) {
  if (!gPeerStalled.load()) return false;
  if (why != nullptr) {
    std::lock_guard<std::mutex> lock(gLeftInFlightMutex);
    *why = gPeerStalledWhy;
  }
  return true;
}

void MpiTransport::doNotePeerStalled(const std::string& why) {
  std::lock_guard<std::mutex> lock(gLeftInFlightMutex);
  if (gPeerStalledWhy.empty()) gPeerStalledWhy = why;
  gPeerStalled.store(true);
}

void noteMpiRequestLeftInFlight(const std::string& what) {
  std::lock_guard<std::mutex> lock(gLeftInFlightMutex);
  if (gLeftInFlightWhy.empty()) gLeftInFlightWhy = what;
  gLeftInFlight.store(true);
}

MpiControlChannel::~MpiControlChannel() {
  // Give small control messages (errors, verdicts) a moment to leave; never block on a dead peer.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (!sends_.empty() && std::chrono::steady_clock::now() < deadline) {
    reapSends();
    std::this_thread::yield();
  }
  if (!sends_.empty()) {
    noteMpiRequestLeftInFlight("rank " + std::to_string(rank()) + ": " + std::to_string(sends_.size()) +
                               " control frame(s) had not left when the channel closed");
  }
  for (PendingSend& p : sends_) {
    MPI_Request_free(&p.request);
    // The buffer must outlive a send MPI may still be making: kept, never freed under MPI.
    keepUntilExit(std::make_unique<std::vector<uint8_t>>(std::move(p.buffer)));
  }
  // A matched receive cannot be withdrawn: one still arriving keeps its buffer, as an abandoned send does.
  for (PendingRecv& r : recvs_) {
    int done = 0;
    MPI_Test(&r.request, &done, MPI_STATUS_IGNORE);
    if (done) continue;
    MPI_Request_free(&r.request);
    keepUntilExit(std::make_unique<std::vector<uint8_t>>(std::move(r.buffer)));
    noteMpiRequestLeftInFlight("rank " + std::to_string(rank()) + ": a control frame " +
                               controlTagName(ControlTag(r.tag)) + " from rank " + std::to_string(r.source) +
                               " was still arriving when the channel closed");
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
  reapSends();
  const auto* b = static_cast<const uint8_t*>(frame);
  size_t offset = 0;
  for (;;) {
    const size_t piece = std::min(kPieceBytes, bytes - offset);
    PendingSend p;
    p.buffer.assign(b + offset, b + offset + piece);
    RINGGUARD_MPI_CHECK(MPI_Isend(p.buffer.data(), int(piece), MPI_BYTE, peer, int(tag), comm_, &p.request));
    sends_.push_back(std::move(p));
    offset += piece;
    if (piece < kPieceBytes) return Status::ok();  // the last piece is shorter (empty after a full one)
  }
}

Status MpiControlChannel::doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from,
                                  bool* got) {
  reapSends();
  *got = false;
  for (;;) {
    std::vector<uint8_t> piece;
    int source = -1;
    bool gotPiece = false;
    RINGGUARD_RETURN_IF_ERROR(probePiece(peer, tag, &piece, &source, &gotPiece));
    if (!gotPiece) return Status::ok();
    const auto key = std::make_pair(source, int(tag));
    auto it = partial_.find(key);
    if (piece.size() == kPieceBytes || it != partial_.end()) {
      if (it == partial_.end()) it = partial_.emplace(key, std::vector<uint8_t>()).first;
      it->second.insert(it->second.end(), piece.begin(), piece.end());
      if (piece.size() == kPieceBytes) {
        if (peer < 0) return Status::ok();  // another source's piece may complete first: the caller polls
        continue;                           // the next piece of this frame is sent right after it
      }
      piece = std::move(it->second);
      partial_.erase(it);
    }
    *frame = std::move(piece);
    *from = source;
    *got = true;
    return Status::ok();
  }
}

Status MpiControlChannel::probePiece(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from,
                                     bool* got) {
  *got = false;
  // A piece still arriving from this (peer, tag) comes first: pieces of one (peer, tag) are delivered in
  // order. A probe of any peer waits for it too (the next piece it could match may be that peer's).
  for (auto it = recvs_.begin(); it != recvs_.end(); ++it) {
    if (it->tag != int(tag) || (peer >= 0 && it->source != peer)) continue;
    int done = 0;
    RINGGUARD_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    if (!done) return Status::ok();
    *frame = std::move(it->buffer);
    *from = it->source;
    recvs_.erase(it);
    *got = true;
    return Status::ok();
  }
  int flag = 0;
  MPI_Message handle;
  MPI_Status st;
  RINGGUARD_MPI_CHECK(MPI_Improbe(peer < 0 ? MPI_ANY_SOURCE : peer, int(tag), comm_, &flag, &handle, &st));
  if (!flag) return Status::ok();
  int count = 0;
  RINGGUARD_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
  // Not MPI_Mrecv: it blocks until the whole message is in, which for a message past the eager limit
  // (one from a peer that sends larger pieces) takes the sender's progress (a stopped peer: forever, with
  // no deadline and no abort).
  recvs_.push_back(
      PendingRecv{MPI_REQUEST_NULL, std::vector<uint8_t>(size_t(count)), st.MPI_SOURCE, int(tag)});
  PendingRecv& r = recvs_.back();
  const int rc = MPI_Imrecv(r.buffer.data(), count, MPI_BYTE, &handle, &r.request);
  if (rc != MPI_SUCCESS) {
    recvs_.pop_back();
    return mpiStatus(rc, "MPI_Imrecv", __FILE__, __LINE__);
  }
  int done = 0;
  RINGGUARD_MPI_CHECK(MPI_Test(&r.request, &done, MPI_STATUS_IGNORE));
  if (!done) return Status::ok();  // the caller polls again, within its deadline
  *frame = std::move(r.buffer);
  *from = r.source;
  recvs_.pop_back();
  *got = true;
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

Status MpiTransport::doPostFrameSend(int peer, const void* payload, size_t bytes, const Trailer* trailer,
                                     FrameRequest* out) {
  if (bytes > kPackedFrameBytes) return Transport::doPostFrameSend(peer, payload, bytes, trailer, out);
  std::vector<uint8_t> frame(bytes + sizeof(Trailer));
  if (bytes != 0) std::memcpy(frame.data(), payload, bytes);
  std::memcpy(frame.data() + bytes, trailer, sizeof(Trailer));
  MPI_Request r = MPI_REQUEST_NULL;
  RINGGUARD_MPI_CHECK(MPI_Isend(frame.data(), int(frame.size()), MPI_BYTE, peer, kTagPackedFrame, data_, &r));
  auto op = std::make_unique<MpiOp>(r, false, rank(), peer, cancelStuck_);
  op->setPacked(std::move(frame), nullptr, 0, nullptr);  // the vector's storage moves with it: r stays valid
  *out = FrameRequest(std::move(op), nullptr);
  return Status::ok();
}

Status MpiTransport::doPostFrameRecv(int peer, void* payload, size_t bytes, Trailer* trailer,
                                     FrameRequest* out) {
  if (bytes > kPackedFrameBytes) return Transport::doPostFrameRecv(peer, payload, bytes, trailer, out);
  std::vector<uint8_t> frame(bytes + sizeof(Trailer));
  MPI_Request r = MPI_REQUEST_NULL;
  RINGGUARD_MPI_CHECK(MPI_Irecv(frame.data(), int(frame.size()), MPI_BYTE, peer, kTagPackedFrame, data_, &r));
  auto op = std::make_unique<MpiOp>(r, true, rank(), peer, cancelStuck_);
  op->setPacked(std::move(frame), payload, bytes, trailer);
  *out = FrameRequest(std::move(op), nullptr);
  return Status::ok();
}

}  // namespace ringguard
