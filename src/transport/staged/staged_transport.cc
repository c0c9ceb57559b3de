#include "transport/staged/staged_transport.h"

#include <algorithm>

#include "core/logging.h"
#include "cuda/cuda_check.h"

namespace ringguard {

// Send: copy out (device -> pinned) -> host send. Receive: host receive -> copy in (pinned -> device).
// Each stage is advanced by test() or by the transport's progress(), never by blocking.
class StagedTransport::Op final : public TransportOp {
 public:
  enum class Stage { kCopyOut, kHost, kCopyIn, kDone };

  Op(StagedTransport* t, bool isSend, int peer, Channel channel, void* device, size_t bytes)
      : t_(t), isSend_(isSend), peer_(peer), channel_(channel), device_(device), bytes_(bytes) {}
  ~Op() override {
    cancel();
    auto& live = t_->live_;
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }

  Status start() {
    RINGGUARD_RETURN_IF_ERROR(t_->pinned_->allocate(std::max<size_t>(bytes_, 1), &staging_));
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    t_->live_.push_back(this);
    if (isSend_) {
      RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(staging_, device_, bytes_, cudaMemcpyDeviceToHost, t_->stream_));
      RINGGUARD_CUDA_CHECK(cudaEventRecord(event_, t_->stream_));
      stage_ = Stage::kCopyOut;
      return Status::ok();
    }
    stage_ = Stage::kHost;
    return Transport::innerPostRecv(t_->host_.get(), peer_, channel_, staging_, bytes_, &host_);
  }

  // `sendsBlocked`: an earlier send is still copying out. Its host send must be posted first (the host
  // transport matches messages to a peer in posting order), so this send waits even if its own copy is
  // done; the copies complete in stream order, but two event queries can observe them out of order.
  Status advance(bool* sendsBlocked) {
    if (stage_ == Stage::kCopyOut) {
      if (*sendsBlocked) return Status::ok();
      bool ready = false;
      RINGGUARD_RETURN_IF_ERROR(eventDone(&ready));
      if (!ready) {
        *sendsBlocked = true;
        return Status::ok();
      }
      stage_ = Stage::kHost;
      RINGGUARD_RETURN_IF_ERROR(
          Transport::innerPostSend(t_->host_.get(), peer_, channel_, staging_, bytes_, &host_));
    }
    if (stage_ == Stage::kCopyIn) {
      bool ready = false;
      RINGGUARD_RETURN_IF_ERROR(eventDone(&ready));
      if (ready) return finish();
      return Status::ok();
    }
    if (stage_ == Stage::kHost) {
      bool done = false;
      RINGGUARD_RETURN_IF_ERROR(host_->test(&done));
      if (!done) return Status::ok();
      host_.reset();
      if (isSend_) return finish();
      RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(device_, staging_, bytes_, cudaMemcpyHostToDevice, t_->stream_));
      RINGGUARD_CUDA_CHECK(cudaEventRecord(event_, t_->stream_));
      stage_ = Stage::kCopyIn;
    }
    return Status::ok();
  }

  Status test(bool* done) override {
    // Advance every op in posting order, never this one alone: host sends to a peer must be posted in
    // the order their slices were posted, or the host transport would match them to the wrong receives.
    RINGGUARD_RETURN_IF_ERROR(t_->doProgress());
    *done = stage_ == Stage::kDone;
    return Status::ok();
  }

  void cancel() override {
    // A host send still in flight cannot be withdrawn (MPI sends run on in the background once freed): its
    // staging buffer must never be reused or freed, so it is abandoned (leaked) instead of returned.
    const bool sendInFlight = isSend_ && host_ != nullptr;
    if (host_) host_->cancel();
    host_.reset();
    // A copy may still read or write the staging buffer; it cannot block on the network, so wait for it.
    if (event_) {
      cudaEventSynchronize(event_);
      cudaEventDestroy(event_);
      event_ = nullptr;
    }
    if (staging_ && sendInFlight) {
      logWarn(Subsys::kTransport,
              "staged send of {} bytes to rank {} cancelled in flight: its pinned staging buffer is leaked",
              bytes_, peer_);
      (void)t_->pinned_->abandon(staging_);
    } else if (staging_) {
      (void)t_->pinned_->free(staging_);
    }
    staging_ = nullptr;
    stage_ = Stage::kDone;
  }

 private:
  Status eventDone(bool* ready) {
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" must not linger as the thread's last error
      *ready = false;
      return Status::ok();
    }
    RINGGUARD_CUDA_CHECK(e);
    *ready = true;
    return Status::ok();
  }

  Status finish() {
    stage_ = Stage::kDone;
    cancel();  // releases the event and the staging buffer
    return Status::ok();
  }

  StagedTransport* t_;
  bool isSend_;
  int peer_;
  Channel channel_;
  void* device_;
  size_t bytes_;
  void* staging_ = nullptr;
  cudaEvent_t event_ = nullptr;
  std::unique_ptr<TransportOp> host_;
  Stage stage_ = Stage::kDone;
};

StagedTransport::StagedTransport(std::unique_ptr<Transport> host, PinnedHostPool* pinned, cudaStream_t stream)
    : Transport(host->rank(), host->size()), host_(std::move(host)), pinned_(pinned), stream_(stream) {}

StagedTransport::~StagedTransport() = default;

Status StagedTransport::doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                                   std::unique_ptr<TransportOp>* out) {
  auto op = std::make_unique<Op>(this, true, peer, channel, const_cast<void*>(data), bytes);
  RINGGUARD_RETURN_IF_ERROR(op->start());
  *out = std::move(op);
  return Status::ok();
}

Status StagedTransport::doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                                   std::unique_ptr<TransportOp>* out) {
  auto op = std::make_unique<Op>(this, false, peer, channel, data, bytes);
  RINGGUARD_RETURN_IF_ERROR(op->start());
  *out = std::move(op);
  return Status::ok();
}

Status StagedTransport::doProgress() {
  bool sendsBlocked = false;
  for (Op* op : live_) RINGGUARD_RETURN_IF_ERROR(op->advance(&sendsBlocked));
  return Status::ok();
}

}  // namespace ringguard
