#pragma once
// Verified point-to-point messages between the ranks of a group, issued one direction at a time (c10d's
// isend / irecv): each (peer, direction) is a lane with a thread of its own, so `irecv(left); isend(right)`
// on every rank of a ring does not deadlock, and messages of one (peer, direction) match in issue order
// (docs/design/protocol.md, "Point-to-point lanes"). Every message runs the engine's verified send/recv.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

class PointToPoint {
 public:
  // Runs on the lane's thread once the message completed, with its Status.
  using Done = std::function<void(const Status&)>;
  // An any-source receive's: also the rank the message came from (-1 on failure).
  using DoneFrom = std::function<void(const Status&, int source)>;

  // Runs what is queued (each message ends, at worst, at its timeout), then joins the lanes.
  virtual ~PointToPoint() = default;

  // `count` elements of `dtype` at `data` (host memory, valid until `done` ran) to / from `peer`, another
  // rank. `tag` (non-negative) must be the one the other side gives; a count, dtype or tag that differs is
  // an error on both sides naming both. Bad arguments run `done` at once, on the caller's thread, with
  // kInvalidArgument.
  virtual void send(int peer, int tag, const void* data, size_t count, DataType dtype, Done done) = 0;
  virtual void recv(int peer, int tag, void* data, size_t count, DataType dtype, Done done) = 0;
  // A receive from whichever peer sends first: receives match in issue order whatever their source, and
  // among the peers whose message is there the lowest rank's is taken.
  virtual void recvAny(int tag, void* data, size_t count, DataType dtype, DoneFrom done) = 0;

  // Fails what is queued and the messages in flight at their next wait (kAborted), and tells the peers.
  virtual void abort(const std::string& why) = 0;
  // A failure elsewhere over the same ranks: a peer may never say goodbye, so the end does not wait for it.
  virtual void peersMayBeGone() = 0;

  // Fault injection of the messages that start after this call.
  virtual Status setFault(const FaultOptions& fault) = 0;
  virtual Counters counters() const = 0;
  virtual Status firstError() const = 0;
};

// The lanes over a host transport of their own from `bootstrap` (createHostTransport: collective where the
// bootstrap's is). `options` must be valid for the group's size.
Status createPointToPoint(Bootstrap& bootstrap, const Options& options, std::unique_ptr<PointToPoint>* out);

}  // namespace ringguard
