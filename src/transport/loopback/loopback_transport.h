#pragma once
// N ranks in one process (one thread each, or each Communicator's progress thread), connected through
// in-memory queues: the transport the algorithm layer's unit tests run on. It keeps the contracts the real
// transports have: messages of one (source, destination, channel) match in post order; a receive
// completes when the matching send's bytes were copied into it, and only then does the send complete (a
// rendezvous, so an algorithm that reuses a send buffer too early is caught); a message larger than the
// receive posted for it is an error on both sides naming both sizes, never an overflow; control frames go
// through the sealed ControlChannel like every other transport's.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace ringguard {

class LoopbackFabric {
 public:
  explicit LoopbackFabric(int size);
  int size() const { return size_; }

  // Test hook: sees every sealed control frame as it leaves `from` for `to`, and may change it (a hostile
  // peer that re-seals a forged body, or a wire that damages it). Returning false drops the frame. Set it
  // before the ranks start talking.
  using ControlHook = std::function<bool(int from, int to, ControlTag tag, std::vector<uint8_t>* frame)>;
  void setControlHook(ControlHook hook);

  // Data messages posted on either side and not matched yet, over all links.
  size_t unmatched() const;
  // Control frames delivered and not taken yet, over all ranks.
  size_t undeliveredControlFrames() const;

  struct Op;  // one posted send or receive (shared by the queue and its TransportOp)

 private:
  friend class LoopbackTransport;
  friend class LoopbackControlChannel;
  static constexpr int kChannels = 2;
  struct Link {  // one (source, destination): both channels, under one lock
    mutable std::mutex mutex;
    std::deque<std::shared_ptr<Op>> sends[kChannels], recvs[kChannels];
  };
  Link& link(int src, int dst) { return *links_[size_t(src) * size_t(size_) + size_t(dst)]; }
  // Copies as many matched pairs as the queues of `channel` hold (the link's lock held).
  static void match(Link& l, int channel);
  void sendControl(int from, int to, ControlTag tag, std::vector<uint8_t> frame);
  bool takeControl(int to, int from, ControlTag tag, std::vector<uint8_t>* frame, int* src);

  const int size_;
  std::vector<std::unique_ptr<Link>> links_;
  mutable std::mutex controlMutex_;
  ControlHook hook_;
  std::vector<std::deque<std::vector<uint8_t>>> inbox_;  // [(to * size + from) * kNumControlTags + tag]
};

// One rank of a fabric.
class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, int rank);
  ~LoopbackTransport() override;
  const char* name() const override { return "loopback"; }
  size_t eagerBytes() const override { return kHostEagerBytes; }
  ControlChannel* control() override { return control_.get(); }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
  std::unique_ptr<ControlChannel> control_;
};

// `size` transports over one new fabric (returned in *fabric when given), rank r at index r.
std::vector<std::unique_ptr<Transport>> makeLoopbackTransports(
    int size, std::shared_ptr<LoopbackFabric>* fabric = nullptr);

}  // namespace ringguard
