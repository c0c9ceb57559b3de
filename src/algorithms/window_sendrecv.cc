#include "algorithms/window_sendrecv.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "algorithms/eager.h"
#include "algorithms/peer_messages.h"
#include "algorithms/window_seal.h"
#include "algorithms/window_wait.h"
#include "core/copy_bytes.h"
#include "core/fault_injector.h"
#include "core/repair.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {

std::string prefix(uint64_t seq) { return "sendrecv seq " + std::to_string(seq) + ": "; }

// This rank's verdict on src's message `seq`, where src waits for it: taken, or a payload corrupt on every
// read, which both ends return alike (as the two-sided path's last verdict makes them). Other errors (a
// mismatch, a sender not believed) reach src as on the two-sided path: the error frame the runtime sends
// for a failed message (kPeerError there, naming this rank's words).
void acknowledge(const Windows& w, int src, uint64_t seq, const Status& outcome) {
  SlotAck& a = w.ack(w.rank(), src);
  if (outcome.isOk()) {
    a.message.store(seq + 1, std::memory_order_release);
  } else if (outcome.code() == StatusCode::kCorruption) {
    const std::string& why = outcome.message();
    const size_t len = std::min(why.size(), kWindowWhyBytes - 1);
    std::memcpy(a.why, why.data(), len);
    a.why[len] = '\0';
    a.code = uint32_t(outcome.code());
    a.failed.store(seq + 1, std::memory_order_release);
  } else {
    return;
  }
  w.wake(src);
}

// The seal of src's slot, once its CRC holds (control-mode fault injection damages the first read, keyed
// as the fingerprint frame from src would be).
Status readSeal(const CollectiveContext& ctx, const Windows& w, int src, SlotSeal* out) {
  const int me = w.rank();
  const SlotHeader& h = w.slot(src, me);
  int reads = 0;
  if (readSealCopy(ctx, h.seal, src, me, out, &reads)) return Status::ok();
  return Status(StatusCode::kCorruption, prefix(ctx.seq) + "the fingerprint in rank " + std::to_string(src) +
                                             "'s slot failed its CRC on all " + std::to_string(reads) +
                                             " reads");
}

// The payload of src's slot into `dst`, verified; the error both ends return when it fails every read.
Status readPayload(const CollectiveContext& ctx, const Windows& w, int src, uint64_t seq, uint8_t* dst,
                   size_t bytes) {
  const int me = w.rank();
  const SlotHeader& h = w.slot(src, me);
  const uint8_t* data = w.slotData(src, me);
  // Published by address (single-copy read): read once, and only where this rank can read the sender's
  // memory; the length is this rank's own.
  const uint64_t address = h.address;
  if (address != 0 && (!w.crossReadable() || !sourceReadable(address, bytes))) {
    return Status(StatusCode::kTransportError,
                  prefix(seq) + "rank " + std::to_string(src) + "'s slot gives its payload at address " +
                      std::to_string(address) + " in its process, which this rank cannot read " +
                      (w.crossReadable() ? "as " + std::to_string(bytes) + " bytes (a range that wraps)"
                                         : "(no single-copy reads in this group)"));
  }
  const SliceId expected{seq, 0, 0, uint32_t(src), uint32_t(bytes), 0};
  const int reads = std::max(1, ctx.options->maxRetries + 1);
  SliceCheck check = SliceCheck::kOk;
  for (int attempt = 0; attempt < reads; ++attempt) {
    // Re-read from the slot, or the buffer, that the sender retains until this rank acknowledged.
    if (attempt > 0) ctx.counters->retransmitted++;
    if (address != 0 && bytes > 0) {
      RINGGUARD_RETURN_IF_ERROR(w.crossRead(src, address, dst, bytes));
    } else if (bytes > 0) {
      copyBytes(dst, data, bytes);  // an empty message may have no buffer
    }
    EagerView view;
    view.payload = dst;
    view.bytes = bytes;
    view.trailer = h.trailer;
    check = verifyEagerPayload(ctx, expected, view, ctx.counters, attempt);
    if (!isLinkFailure(check)) break;
  }
  if (check == SliceCheck::kPoisoned) {
    return Status(StatusCode::kTransportError,
                  prefix(seq) + "rank " + std::to_string(src) + " sent a poisoned payload");
  }
  if (!isLinkFailure(check)) return Status::ok();
  // The two-sided path's words for the same failure (sendrecv.cc), so either path reads alike.
  SliceFailure f;
  f.column = uint32_t(src);
  f.sender = src;
  f.receiver = me;
  f.reason = uint8_t(check);
  return Status(StatusCode::kCorruption, prefix(seq) + "slice still failing verification after " +
                                             std::to_string(reads - 1) +
                                             " retransmission(s): " + describeFailure(f));
}

}  // namespace

bool runsInSlot(const CollectiveContext& ctx, const Executor& exec, size_t bytes) {
  const Windows* w = ctx.transport->windows();
  return w != nullptr && exec.memory() == MemoryKind::kHost && slotFits(w->layout(), bytes);
}

void publishSlot(const CollectiveContext& ctx, int dst, uint64_t seq, const Fingerprint& f, const void* data,
                 size_t bytes) {
  const Windows& w = *ctx.transport->windows();
  const int me = w.rank();
  if (const FaultInjector* inj = ctx.injector) {
    if (int ms = inj->delayMs(seq, 0, 0, dst, 0)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ctx.counters->delayed++;
    }
  }
  SlotHeader& h = w.slot(me, dst);
  SlotSeal seal;
  std::memset(static_cast<void*>(&seal), 0, sizeof seal);  // the CRC covers the padding too
  seal.fingerprint = f;
  seal.crc = crc32(&seal, offsetof(SlotSeal, crc));
  std::memcpy(&h.seal, &seal, sizeof seal);
  // The CRC of the source, so a copy damaged on its way into the slot fails the receiver's check.
  const uint32_t crc = crc32(data, bytes);
  // A large message stays in the caller's buffer, which the receiver reads straight into its own
  // (docs/design/protocol.md, "Single-copy read"): the caller's send waits for the acknowledgement anyway.
  const bool byAddress = bytes > 0 && w.publishesMessageByAddress(bytes);
  h.address = byAddress ? uint64_t(uintptr_t(data)) : 0;
  if (bytes > 0 && !byAddress) w.copyIn(w.slotData(me, dst), data, bytes);
  h.trailer = makeTrailer(SliceId{seq, 0, 0, uint32_t(me), uint32_t(bytes), 0}, crc, 0);
  h.message.store(seq + 1, std::memory_order_release);
  ctx.counters->slicesSent++;
  ctx.counters->bytesSent += bytes;
  w.wake(dst);
}

bool slotPublished(const Windows& w, int src, uint64_t seq) {
  return w.slot(src, w.rank()).message.load(std::memory_order_acquire) == seq + 1;
}

Status takeMessage(const CollectiveContext& ctx, int src, uint64_t seq, bool repairable, bool slotFirst,
                   bool* inSlot, std::vector<uint8_t>* frame, bool* damaged) {
  const Windows& w = *ctx.transport->windows();
  *inSlot = false;
  *damaged = false;
  if (slotFirst) {
    // Only the flag, for as long as waitUntil polls before it blocks; the frame is looked for after.
    const auto budget = ctx.transport->pollBeforeBlocking();
    const auto start = std::chrono::steady_clock::now();
    do {
      for (int i = 0; i < kInlinePolls; ++i) {
        if (slotPublished(w, src, seq)) {
          *inSlot = true;
          return Status::ok();
        }
      }
      std::this_thread::yield();
    } while (std::chrono::steady_clock::now() - start < budget);
  }
  return pollUntil(
      ctx,
      [&](bool* done) {
        if (slotPublished(w, src, seq)) {
          *inSlot = *done = true;
          return Status::ok();
        }
        int from = -1;
        ControlChannel* control = ctx.transport->control();
        return repairable ? control->probeRepairable(src, ControlTag::kFingerprint, frame, &from, done,
                                                     damaged, ctx.injector, ctx.counters)
                          : control->probe(src, ControlTag::kFingerprint, frame, &from, done, ctx.injector,
                                           ctx.counters);
      },
      [src] { return "the sendrecv message from rank " + std::to_string(src); }, src);
}

Status readSlot(const CollectiveContext& ctx, int src, uint64_t seq, const Fingerprint& expected, void* recv,
                size_t bytes) {
  const Windows& w = *ctx.transport->windows();
  SlotSeal seal;
  Status st = readSeal(ctx, w, src, &seal);
  if (st.isOk()) {
    const auto* fp = reinterpret_cast<const uint8_t*>(&seal.fingerprint);
    st = checkPeerFingerprint(ctx, src, std::vector<uint8_t>(fp, fp + sizeof(Fingerprint)), expected,
                              "sendrecv");
  }
  // Fingerprints that agree agree on the size, which the sender published only where it fits; a sender
  // that says otherwise is not believed.
  if (st.isOk() && !slotFits(w.layout(), bytes)) {
    st = Status(StatusCode::kTransportError, prefix(seq) + "rank " + std::to_string(src) + " published " +
                                                 std::to_string(bytes) + " bytes in a slot of " +
                                                 std::to_string(w.layout().slotCapacity));
  }
  if (st.isOk()) st = readPayload(ctx, w, src, seq, static_cast<uint8_t*>(recv), bytes);
  acknowledge(w, src, seq, st);
  return st;
}

Status awaitSlotAck(const CollectiveContext& ctx, int dst, uint64_t seq) {
  const Windows& w = *ctx.transport->windows();
  const SlotAck& a = w.ack(dst, w.rank());
  RINGGUARD_RETURN_IF_ERROR(waitUntil(
      ctx,
      [&a, seq] {
        return a.message.load(std::memory_order_acquire) == seq + 1 ||
               a.failed.load(std::memory_order_acquire) == seq + 1;
      },
      [dst] { return "rank " + std::to_string(dst) + " to take the sendrecv message from its slot"; }, dst));
  if (a.failed.load(std::memory_order_acquire) != seq + 1) return Status::ok();
  char why[kWindowWhyBytes];
  std::memcpy(why, a.why, sizeof why);  // the peer's text: bounded here, whatever it wrote
  why[sizeof why - 1] = '\0';
  const auto code = StatusCode(a.code);
  return Status(code == StatusCode::kCorruption ? code : StatusCode::kTransportError, why);
}

}  // namespace ringguard
