#pragma once
// The handshake every communicator makes before its first collective, and the one two ranks make before
// their first point-to-point message (docs/design/protocol.md, "Handshake"): the ranks compare the
// protocol version and every setting that must agree, so ranks that disagree fail cleanly instead of
// overflowing receive slots or ending with different errors.
#include <atomic>
#include <cstdint>
#include <vector>

#include "ringguard/core/options.h"
#include "ringguard/core/status.h"
#include "transport/transport.h"

namespace ringguard {

// Raised whenever a change makes ranks of different builds unable to work together (frames, trailers,
// schedule, control messages).
inline constexpr uint32_t kProtocolVersion = 7;

// Collective over the transport's ranks, on the control channel (tag kHandshake), in O(log N) rounds.
// `options` as the communicator resolved them (sliceBytes and slots after the transport's defaults). OK
// when every rank has the same protocol version, slice bytes, slots, max retries and timeout; otherwise
// every rank returns the same kInvalidArgument naming the first setting that differs and both sides
// ("RINGGUARD_SLICE_BYTES differs: rank 0 has 1048576, rank 1 has 4096"), comparing the lowest rank with
// the lowest rank whose settings differ from it. Waits at most options.timeout for a peer (kTimeout), sees
// peers' broadcast errors (kPeerError), stops when *aborted becomes true (kAborted); errors that only this
// rank sees are broadcast. `protocolVersion` is a test hook (a simulated version skew).
Status handshake(Transport* transport, const Options& options, const std::atomic<bool>* aborted = nullptr,
                 uint32_t protocolVersion = kProtocolVersion);

// The same comparison between this rank and `peer` only, for point-to-point lanes (only the two ends of a
// message must agree): one record each way on the control channel (tag kHandshake), to be made once per
// pair of ranks, by both. Both sides return the same kInvalidArgument ("point-to-point settings disagree:
// RINGGUARD_SLICE_BYTES differs: rank 0 has 4096, rank 1 has 1024", the lower rank first); a record of
// another size is a kTransportError naming the peer; waits, errors and abort as handshake().
Status peerHandshake(Transport* transport, int peer, const Options& options,
                     const std::atomic<bool>* aborted = nullptr, uint32_t protocolVersion = kProtocolVersion);

// peerHandshake in halves, for a side that must not wait on a peer that may never send to it (a receive from
// any source polls every peer: PeerLanes::recvAny): post sends this rank's record, finish waits for the
// peer's and compares, compare checks a record the caller took off the channel itself (tag kHandshake).
// Together they return what peerHandshake returns.
Status postPeerHandshake(Transport* transport, int peer, const Options& options,
                         uint32_t protocolVersion = kProtocolVersion);
Status finishPeerHandshake(Transport* transport, int peer, const Options& options,
                           const std::atomic<bool>* aborted = nullptr,
                           uint32_t protocolVersion = kProtocolVersion);
Status comparePeerHandshake(Transport* transport, int peer, const Options& options,
                            const std::vector<uint8_t>& record, uint32_t protocolVersion = kProtocolVersion);

}  // namespace ringguard
