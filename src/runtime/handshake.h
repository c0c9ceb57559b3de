#pragma once
// The handshake every communicator makes before its first collective (docs/design/protocol.md,
// "Handshake"): the ranks compare the protocol version and every setting that must agree, so ranks that
// disagree fail cleanly instead of overflowing receive slots or ending with different errors.
#include <atomic>
#include <cstdint>

#include "ringguard/core/options.h"
#include "ringguard/core/status.h"
#include "transport/transport.h"

namespace ringguard {

// Raised whenever a change makes ranks of different builds unable to work together (frames, trailers,
// schedule, control messages).
inline constexpr uint32_t kProtocolVersion = 6;

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

}  // namespace ringguard
