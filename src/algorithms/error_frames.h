#pragma once
// Error frames (control tag kError): what a rank announces when it fails, so its peers fail fast with the
// real cause (docs/design/protocol.md, "Errors, timeouts, poisoning"). Each carries the collective it ends,
// so a peer still in an earlier collective finishes that one first, and a timeout carries the rank it was
// waiting on, so the ranks can follow the waits to the rank that stopped (stall_report.h).
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "transport/transport.h"

namespace ringguard {

struct CollectiveContext;

// The collective number of an error outside the collective numbering (handshake, abort, point-to-point).
inline constexpr uint64_t kNoCollective = UINT64_MAX;

enum class ErrorKind : uint8_t {
  kError = 0,   // a fatal error; the text is the cause
  kReport = 1,  // a wait that timed out (or was told of a peer's): the text is what it was waiting for
};

// Wire body of an error frame: this header, then the text.
struct ErrorFrameHeader {
  uint64_t seq;  // the collective it ends, or kNoCollective
  uint8_t kind;  // ErrorKind
  uint8_t reserved[3];
  int32_t waitingOn;   // kReport: the rank waited on; -1 for this rank's own work
  uint32_t waitedMs;   // kReport: how long that wait had lasted
  uint32_t stalledMs;  // kReport: how long this rank itself made no progress, when that exceeded the timeout
  uint32_t inCollectiveMs;  // kReport: how long this rank had been in the collective (since its first wait)
  uint32_t reserved2;       // 0
};
static_assert(sizeof(ErrorFrameHeader) == 32, "error frame header is a fixed wire format");

// An error frame as received.
struct PeerError {
  int from = -1;
  uint64_t seq = kNoCollective;
  ErrorKind kind = ErrorKind::kError;
  int waitingOn = -1;
  uint32_t waitedMs = 0, stalledMs = 0, inCollectiveMs = 0;
  std::string text;
};

// Errors of a later collective that arrived while this rank was still in an earlier one: held until this
// rank reaches that collective. One per communicator (Communicator::Impl); safe for concurrent use.
class HeldErrors {
 public:
  void hold(PeerError e);
  // Takes the first held error of a collective <= seq, if any.
  bool takeDue(uint64_t seq, PeerError* out);

 private:
  std::mutex mutex_;
  std::vector<PeerError> held_;
};

// Sends `frame` to every peer (best effort: a peer that is gone must not stop the others being told).
void sendErrorFrame(Transport* transport, const PeerError& frame);

// Tells every peer about a fatal error so they fail fast with the same cause. `seq`: the collective it
// ends, for a collective of every rank; kNoCollective otherwise.
void broadcastError(Transport* transport, const Status& error, uint64_t seq = kNoCollective);

// Takes the next error frame for this collective, if one is due: *got, with it in *out. One of a later
// collective (ctx.held set, its seq above ctx.seq) is held instead; a held one is returned once ctx.seq
// reaches it. A frame that is not an error frame of this format is a kTransportError naming the peer.
Status takePeerError(const CollectiveContext& ctx, PeerError* out, bool* got);

// kPeerError "rank <from> reported: <text>".
Status peerErrorStatus(const PeerError& e);

}  // namespace ringguard
