#include "transport/transport.h"

#include <string>

namespace ringguard {

Status FrameRequest::test(bool* done) {
  *done = false;
  for (auto* part : {&payload_, &trailer_}) {
    if (!*part) continue;
    bool partDone = false;
    RINGGUARD_RETURN_IF_ERROR((*part)->test(&partDone));
    if (partDone) {
      // Both parts of a frame are posted together: one launch, one event (the later one, to be safe).
      if (std::shared_ptr<void> e = (*part)->streamEvent()) event_ = std::move(e);
      part->reset();
    }
  }
  *done = !payload_ && !trailer_;
  return Status::ok();
}

void FrameRequest::cancel() {
  for (auto* part : {&payload_, &trailer_}) {
    if (*part) (*part)->cancel();
    part->reset();
  }
}

Status Transport::checkPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": peer " + std::to_string(peer) +
                                                    " is outside [0, " + std::to_string(size_) + ")");
  }
  return Status::ok();
}

Status Transport::postSend(int peer, const void* payload, size_t bytes, const Trailer* trailer,
                           FrameRequest* out) {
  RINGGUARD_RETURN_IF_ERROR(checkPeer(peer, "postSend"));
  // The trailer may live in device memory (device executors): it is never read here.
  RINGGUARD_ENFORCE(trailer != nullptr, "postSend: a trailer is required");
  return doPostFrameSend(peer, payload, bytes, trailer, out);
}

Status Transport::postRecv(int peer, void* payload, size_t bytes, Trailer* trailer, FrameRequest* out) {
  RINGGUARD_RETURN_IF_ERROR(checkPeer(peer, "postRecv"));
  RINGGUARD_ENFORCE(trailer != nullptr, "postRecv: a trailer slot is required");
  return doPostFrameRecv(peer, payload, bytes, trailer, out);
}

Status Transport::doPostFrameSend(int peer, const void* payload, size_t bytes, const Trailer* trailer,
                                  FrameRequest* out) {
  std::unique_ptr<TransportOp> p, t;
  RINGGUARD_RETURN_IF_ERROR(doPostSend(peer, Channel::kPayload, payload, bytes, &p));
  RINGGUARD_RETURN_IF_ERROR(doPostSend(peer, Channel::kTrailer, trailer, sizeof(Trailer), &t));
  *out = FrameRequest(std::move(p), std::move(t));
  return Status::ok();
}

Status Transport::doPostFrameRecv(int peer, void* payload, size_t bytes, Trailer* trailer,
                                  FrameRequest* out) {
  std::unique_ptr<TransportOp> p, t;
  RINGGUARD_RETURN_IF_ERROR(doPostRecv(peer, Channel::kPayload, payload, bytes, &p));
  RINGGUARD_RETURN_IF_ERROR(doPostRecv(peer, Channel::kTrailer, trailer, sizeof(Trailer), &t));
  *out = FrameRequest(std::move(p), std::move(t));
  return Status::ok();
}

}  // namespace ringguard
