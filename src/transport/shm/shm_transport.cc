#include "transport/shm/shm_transport.h"

#include <sched.h>

#include <algorithm>

#include "transport/shm/cross_memory.h"
#include "transport/shm/shm_core.h"
#include "transport/window.h"

namespace ringguard {

namespace {

// Control frames through the control rings. What shared memory cannot tell, that a peer exited or left,
// the host's channel can: a probe that finds nothing asks it (its goodbye or its closed connection), and
// a send blocked on a full ring asks it while waiting. Every frame a peer wrote before its goodbye is in
// our ring by the time the goodbye arrives, so "has left" is never reported over a frame still to read.
class ShmControlChannel final : public ControlChannel {
 public:
  ShmControlChannel(int rank, int size, std::shared_ptr<ShmCore> core, Transport* host,
                    std::chrono::milliseconds sendTimeout)
      : ControlChannel(rank, size), core_(std::move(core)), host_(host), sendTimeout_(sendTimeout) {}

 protected:
  Status doSend(int peer, ControlTag tag, const void* frame, size_t bytes) override {
    return core_->sendControl(peer, tag, frame, bytes, sendTimeout_,
                              [this, peer, tag] { return hostSays(peer, tag); });
  }
  Status doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got) override {
    RINGGUARD_RETURN_IF_ERROR(core_->takeControl(peer, tag, frame, from, got));
    if (*got || peer == rank()) return Status::ok();
    // As the c10d channel does: a peer's error frame still to be taken is not pre-empted by its departure
    // (a rank that failed or aborted, announced it, then destroyed its group): the caller's own probe of
    // it gives the cause.
    if (core_->pending(peer, ControlTag::kError)) return Status::ok();
    return hostSays(peer, tag);
  }

 private:
  // The host channel carries no frame of ours: a probe of it only reports a peer that left or failed.
  Status hostSays(int peer, ControlTag tag) {
    std::vector<uint8_t> message;
    int from = -1;
    bool got = false;
    RINGGUARD_RETURN_IF_ERROR(host_->control()->probe(peer, tag, &message, &from, &got));
    if (!got) return Status::ok();
    return Status(StatusCode::kTransportError,
                  std::string("a ") + controlTagName(tag) + " frame from rank " + std::to_string(from) +
                      " came over the host transport, not shared memory (ranks that disagree on "
                      "RINGGUARD_CPU_TRANSPORT?)");
  }

  std::shared_ptr<ShmCore> core_;
  Transport* host_;
  const std::chrono::milliseconds sendTimeout_;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(std::unique_ptr<Transport> host, std::unique_ptr<shm::Segment> own,
               std::vector<std::unique_ptr<shm::Segment>> peers, std::chrono::milliseconds sendTimeout,
               std::chrono::microseconds spin, size_t windowCapacity, SingleCopy singleCopy,
               std::optional<bool> coresOfTheirOwn, std::optional<bool> streamCopies)
      : Transport(host->rank(), host->size()),
        spin_(spin),
        host_(std::move(host)),
        core_(std::make_shared<ShmCore>(rank(), size(), std::move(own), std::move(peers))),
        control_(rank(), size(), core_, host_.get(), sendTimeout) {
    std::weak_ptr<ShmCore> core = core_;
    hostWakes_ = host_->setEventListener([core] {
      if (auto c = core.lock()) c->own().raise();
    });
    if (windowCapacity > 0) {
      std::vector<uint8_t*> base(static_cast<size_t>(size()));
      for (int r = 0; r < size(); ++r) base[size_t(r)] = core_->segment(r).window();
      ShmCore* c = core_.get();  // the windows live in the core's segments and die with this transport
      CrossRead cross;
      const bool cores = coresOfTheirOwn.value_or(coreForEachRank(size()));
      if (singleCopy.pids.size() == size_t(size())) {
        cross = [pids = std::move(singleCopy.pids)](int r, uint64_t address, void* dst, size_t bytes) {
          return shm::readCrossMemory(pids[size_t(r)], r, address, dst, bytes);
        };
      }
      windows_ = std::make_unique<Windows>(
          rank(), WindowLayout::of(windowCapacity, size()), std::move(base),
          [c](int r) { c->segment(r).raise(); }, std::move(cross), singleCopy.fromBytes, cores,
          streamCopies.value_or(cores));
    }
  }
  ~ShmTransport() override {
    host_->setEventListener(nullptr);
    core_->breakAll();  // an op still held somewhere fails instead of moving bytes
  }

  const char* name() const override { return "shm"; }
  size_t defaultSliceBytes() const override { return host_->defaultSliceBytes(); }
  int defaultSlots() const override { return host_->defaultSlots(); }
  // A small collective's payload rides its fingerprint frame, which here is one copy into a ring.
  size_t eagerBytes() const override { return kHostEagerBytes; }
  ControlChannel* control() override { return &control_; }
  std::chrono::microseconds pollBeforeBlocking() const override { return spin_; }
  Windows* windows() override { return windows_.get(); }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override {
    *out =
        core_->post(core_, peer, channelIndex(channel), static_cast<uint8_t*>(const_cast<void*>(data)), bytes,
                    /*isRecv=*/false);
    return Status::ok();
  }
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override {
    *out =
        core_->post(core_, peer, channelIndex(channel), static_cast<uint8_t*>(data), bytes, /*isRecv=*/true);
    return Status::ok();
  }
  Status doProgress() override {
    core_->progress();
    return Status::ok();
  }
  void doAbort() override {
    host_->markBroken();
    core_->breakAll();
  }
  // The goodbye goes over the host transport, after every frame this rank wrote into the rings.
  void doLeave() override { host_->leave(); }
  void doNotePeerStalled(const std::string& why) override { host_->notePeerStalled(why); }
  uint64_t doEventCount() const override { return core_->own().bell(); }
  bool doWaitForEvent(uint64_t seen, std::chrono::microseconds max) override {
    // A host whose events do not reach the doorbell (the loopback fabric) is looked at often instead.
    if (!hostWakes_) max = std::min(max, std::chrono::microseconds(50));
    core_->own().wait(uint32_t(seen), max);
    return true;
  }

 private:
  static uint32_t channelIndex(Channel c) { return c == Channel::kPayload ? 0 : 1; }

  const std::chrono::microseconds spin_;

  std::unique_ptr<Transport> host_;
  std::shared_ptr<ShmCore> core_;
  ShmControlChannel control_;
  std::unique_ptr<Windows> windows_;
  bool hostWakes_ = false;
};

}  // namespace

std::unique_ptr<Transport> makeShmTransport(std::unique_ptr<Transport> host,
                                            std::unique_ptr<shm::Segment> own,
                                            std::vector<std::unique_ptr<shm::Segment>> peers,
                                            std::chrono::milliseconds sendTimeout,
                                            std::chrono::microseconds spin, size_t windowCapacity,
                                            SingleCopy singleCopy, std::optional<bool> coresOfTheirOwn,
                                            std::optional<bool> streamCopies) {
  return std::make_unique<ShmTransport>(std::move(host), std::move(own), std::move(peers), sendTimeout, spin,
                                        windowCapacity, std::move(singleCopy), coresOfTheirOwn, streamCopies);
}

bool coreForEachRank(int ranks) {
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) >= ranks;
}

size_t shmWindowBytes(size_t windowCapacity, int size) {
  return windowCapacity == 0 ? 0 : WindowLayout::of(windowCapacity, size).bytes;
}

}  // namespace ringguard
