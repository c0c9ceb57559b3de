#pragma once
// Send/recv on the windows (docs/design/protocol.md, "Send/recv on the windows"): a message that fits a
// slot (transport/window.h, kWindowSlotBytes) is published in the sender's slot for its receiver with its
// fingerprint and CRC; the receiver checks the fingerprint, verifies the payload as it copies it (re-reading
// it on a failure) and acknowledges by a flag in its own window. No control frame in the fault-free path.
// A larger message keeps the two-sided path; a receive takes whichever way its message came
// (takeMessage), so a sender and receiver that chose differently (their counts differ) still meet and name
// the mismatch.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/agreement.h"
#include "core/fingerprint.h"
#include "executor/executor.h"
#include "transport/window.h"

namespace ringguard {

// Whether a message of `bytes` this rank sends travels in a slot: host memory, a transport with windows, a
// message that fits. Both ends decide from the agreed count.
bool runsInSlot(const CollectiveContext& ctx, const Executor& exec, size_t bytes);

// Publishes message number `seq` (fingerprint `f`, `bytes` at `data`) in this rank's slot for `dst`, and
// rings dst. The slot is free: the previous message in it was acknowledged before its send returned. A
// message Windows::publishesMessageByAddress takes stays at `data`, which the receiver reads single-copy:
// `data` must stay unchanged until awaitSlotAck returned.
void publishSlot(const CollectiveContext& ctx, int dst, uint64_t seq, const Fingerprint& f, const void* data,
                 size_t bytes);

// Whether `src` published its message number `seq` to this rank in its slot (a receive from any source
// looks here as it looks for fingerprint frames).
bool slotPublished(const Windows& w, int src, uint64_t seq);

// Waits for message `seq` from `src` whichever way it comes: in src's slot (*inSlot), or as its fingerprint
// frame, taken into *frame (probeRepairable where `repairable`, the frame carrying a small payload; *damaged
// then says only its CRC failed). `slotFirst`: this rank's count fits a slot, so the slot's flag is polled
// alone first.
Status takeMessage(const CollectiveContext& ctx, int src, uint64_t seq, bool repairable, bool slotFirst,
                   bool* inSlot, std::vector<uint8_t>* frame, bool* damaged);

// Reads message `seq` from src's slot into `recv` (`bytes`, what this rank's arguments say): the
// fingerprint (CRC-sealed, re-read when damaged) against `expected`, a mismatch an error naming both; the
// payload copied, then verified as slice 0 of step 0 in src's column, re-read up to maxRetries times. Then
// acknowledged; a payload corrupt on every read is failed in the acknowledgement with the kCorruption
// returned here, which the sender returns too (other errors reach it in the runtime's error frame).
Status readSlot(const CollectiveContext& ctx, int src, uint64_t seq, const Fingerprint& expected, void* recv,
                size_t bytes);

// Waits for `dst` to acknowledge message `seq`; dst's kCorruption of it is returned as this rank's error.
Status awaitSlotAck(const CollectiveContext& ctx, int dst, uint64_t seq);

}  // namespace ringguard
