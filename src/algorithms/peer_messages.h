#pragma once
// Control messages between two ranks of a collective (point-to-point fingerprints and verdicts, the
// all-to-all split check), over the communicator's sealed control channel.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/agreement.h"
#include "core/fingerprint.h"
#include "core/repair.h"

namespace ringguard {

Status sendToPeer(const CollectiveContext& ctx, int peer, ControlTag tag, const void* data, size_t bytes);
// Waits (pollUntil: deadline, peer errors, abort) for the next message with `tag` from `peer`.
Status receiveFromPeer(const CollectiveContext& ctx, int peer, ControlTag tag, std::vector<uint8_t>* message,
                       const std::function<std::string()>& what);

// `expected` is what this rank will receive from `peer`; the peer sent what it will send, in the fingerprint
// at the start of `message`. kInvalidArgument naming both sides when they differ ("... rank 1 sends
// {sendrecv dtype=f32 count=5 seq=0}, rank 0 expects {... count=4 ...}"); kTransportError when the message
// is shorter than a fingerprint.
Status checkPeerFingerprint(const CollectiveContext& ctx, int peer, const std::vector<uint8_t>& message,
                            const Fingerprint& expected, const char* what);
// Receives the next fingerprint message from `peer` and checks it (checkPeerFingerprint); one of another
// size is an error naming the peer.
Status receivePeerFingerprint(const CollectiveContext& ctx, int peer, const Fingerprint& expected,
                              const char* what);
// The check receivePeerFingerprint applies to a fingerprint message already received.
Status checkPeerFingerprintMessage(const CollectiveContext& ctx, int peer,
                                   const std::vector<uint8_t>& message, const Fingerprint& expected,
                                   const char* what);

// A verdict list of one (peer, direction): `seq` and `round` name it, so a stale or misdirected list is
// rejected.
Status sendPeerVerdict(const CollectiveContext& ctx, int peer, uint64_t seq, int round,
                       const std::vector<SliceFailure>& failures);
Status receivePeerVerdict(const CollectiveContext& ctx, int peer, uint64_t seq, int round,
                          std::vector<SliceFailure>* failures);

}  // namespace ringguard
