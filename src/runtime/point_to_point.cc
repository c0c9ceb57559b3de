// createPointToPoint (ringguard/runtime/point_to_point.h): PeerLanes behind the runtime's public face.
#include "ringguard/runtime/point_to_point.h"

#include <utility>

#include "runtime/peer_lanes.h"

namespace ringguard {

namespace {

class PeerLanesPointToPoint final : public PointToPoint {
 public:
  PeerLanesPointToPoint(std::unique_ptr<Transport> transport, const Options& options)
      : lanes_(std::move(transport), options) {}
  void send(int peer, int tag, const void* data, size_t count, DataType dtype, Done done) override {
    lanes_.send(peer, tag, data, count, dtype, std::move(done));
  }
  void recv(int peer, int tag, void* data, size_t count, DataType dtype, Done done) override {
    lanes_.recv(peer, tag, data, count, dtype, std::move(done));
  }
  void recvAny(int tag, void* data, size_t count, DataType dtype, DoneFrom done) override {
    lanes_.recvAny(tag, data, count, dtype, std::move(done));
  }
  void abort(const std::string& why) override { lanes_.abort(why); }
  void peersMayBeGone() override { lanes_.peersMayBeGone(); }
  Status setFault(const FaultOptions& fault) override { return lanes_.setFault(fault); }
  Counters counters() const override { return lanes_.counters(); }
  Status firstError() const override { return lanes_.firstError(); }

 private:
  PeerLanes lanes_;
};

}  // namespace

Status createPointToPoint(Bootstrap& bootstrap, const Options& options, std::unique_ptr<PointToPoint>* out) {
  std::unique_ptr<Transport> transport;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.createHostTransport(&transport));
  *out = std::make_unique<PeerLanesPointToPoint>(std::move(transport), options);
  return Status::ok();
}

}  // namespace ringguard
