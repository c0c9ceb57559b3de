#include "runtime/handshake.h"

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/agreement.h"
#include "algorithms/peer_messages.h"

namespace ringguard {

namespace {

constexpr uint32_t kHandshakeMagic = 0x31484752;  // "RGH1"

// The wire record. Its layout never changes with the protocol version, so ranks of different versions
// still compare versions and report that, rather than something a new layout garbled.
struct Settings {
  uint32_t magic;
  uint32_t version;
  uint64_t sliceBytes;
  int32_t slots;
  // Was one int32 maxRetries (at most 100): on little-endian hosts an older peer reads as nanCheck 0
  // (off), which is what it does.
  int16_t maxRetries;
  uint8_t nanCheck;  // NanCheck
  uint8_t reserved;  // 0
  int64_t timeoutMs;
};
static_assert(sizeof(Settings) == 32, "handshake record is a fixed wire format");

// The first field that differs, in the order a user fixes them: a version skew explains everything else.
std::string firstDifference(const Settings& a, int rankA, const Settings& b, int rankB) {
  std::ostringstream os;
  auto differs = [&](const char* name, auto x, auto y) {
    os << name << " differs: rank " << rankA << " has " << x << ", rank " << rankB << " has " << y;
  };
  if (a.magic != b.magic) {
    differs("handshake record", a.magic, b.magic);
  } else if (a.version != b.version) {
    differs("ringguard protocol version", a.version, b.version);
  } else if (a.sliceBytes != b.sliceBytes) {
    differs("RINGGUARD_SLICE_BYTES", a.sliceBytes, b.sliceBytes);
  } else if (a.slots != b.slots) {
    differs("RINGGUARD_SLOTS", a.slots, b.slots);
  } else if (a.maxRetries != b.maxRetries) {
    differs("RINGGUARD_MAX_RETRIES", a.maxRetries, b.maxRetries);
  } else if (a.timeoutMs != b.timeoutMs) {
    differs("RINGGUARD_TIMEOUT_MS", a.timeoutMs, b.timeoutMs);
  } else if (a.nanCheck != b.nanCheck) {
    auto name = [](uint8_t m) { return m <= uint8_t(NanCheck::kError) ? nanCheckName(NanCheck(m)) : "?"; };
    differs("RINGGUARD_NAN_CHECK", name(a.nanCheck), name(b.nanCheck));
  } else if (a.reserved != b.reserved) {
    differs("handshake record (reserved byte)", int(a.reserved), int(b.reserved));
  }
  return os.str();
}

Settings settingsOf(const Options& options, uint32_t protocolVersion) {
  Settings mine{};
  mine.magic = kHandshakeMagic;
  mine.version = protocolVersion;
  mine.sliceBytes = options.sliceBytes;
  mine.slots = options.slots;
  mine.maxRetries = int16_t(options.maxRetries);
  mine.nanCheck = uint8_t(options.nanCheck);
  mine.timeoutMs = int64_t(options.timeout.count());
  return mine;
}

CollectiveContext contextOf(Transport* transport, const Options& options, const std::atomic<bool>* aborted) {
  CollectiveContext ctx;
  ctx.transport = transport;
  ctx.options = &options;
  ctx.name = "handshake";
  ctx.aborted = aborted;
  return ctx;
}

}  // namespace

Status handshake(Transport* transport, const Options& options, const std::atomic<bool>* aborted,
                 uint32_t protocolVersion) {
  if (transport->size() == 1) return Status::ok();
  const Settings mine = settingsOf(options, protocolVersion);
  const CollectiveContext ctx = contextOf(transport, options, aborted);
  Disagreement d;
  Status st = findDisagreement(ctx, ControlTag::kHandshake, &mine, sizeof(mine), &d);
  if (!st.isOk()) {
    // Every rank computes the same mismatch; a timeout or a transport failure only this rank knows about.
    if (st.code() != StatusCode::kPeerError) broadcastError(transport, st);
    return st;
  }
  if (d.diffRank == -1) return Status::ok();
  Settings a, b;
  std::memcpy(&a, d.low.data(), sizeof(a));
  std::memcpy(&b, d.diff.data(), sizeof(b));
  return Status(StatusCode::kInvalidArgument,
                "communicator settings disagree: " + firstDifference(a, d.lowRank, b, d.diffRank));
}

Status postPeerHandshake(Transport* transport, int peer, const Options& options, uint32_t protocolVersion) {
  const Settings mine = settingsOf(options, protocolVersion);
  return sendToPeer(contextOf(transport, options, nullptr), peer, ControlTag::kHandshake, &mine,
                    sizeof(mine));
}

Status comparePeerHandshake(Transport* transport, int peer, const Options& options,
                            const std::vector<uint8_t>& msg, uint32_t protocolVersion) {
  const Settings mine = settingsOf(options, protocolVersion);
  if (msg.size() != sizeof(Settings)) {
    return Status(StatusCode::kTransportError,
                  "point-to-point handshake record from rank " + std::to_string(peer) + " has " +
                      std::to_string(msg.size()) + " bytes, not " + std::to_string(sizeof(Settings)));
  }
  Settings theirs;
  std::memcpy(&theirs, msg.data(), sizeof(theirs));
  const int rank = transport->rank();
  // Both sides name the lower rank first, so both report the same text.
  const std::string difference =
      rank < peer ? firstDifference(mine, rank, theirs, peer) : firstDifference(theirs, peer, mine, rank);
  if (difference.empty()) return Status::ok();
  return Status(StatusCode::kInvalidArgument, "point-to-point settings disagree: " + difference);
}

Status finishPeerHandshake(Transport* transport, int peer, const Options& options,
                           const std::atomic<bool>* aborted, uint32_t protocolVersion) {
  const CollectiveContext ctx = contextOf(transport, options, aborted);
  std::vector<uint8_t> msg;
  RINGGUARD_RETURN_IF_ERROR(receiveFromPeer(ctx, peer, ControlTag::kHandshake, &msg, [&] {
    return "the point-to-point handshake record from rank " + std::to_string(peer);
  }));
  return comparePeerHandshake(transport, peer, options, msg, protocolVersion);
}

Status peerHandshake(Transport* transport, int peer, const Options& options, const std::atomic<bool>* aborted,
                     uint32_t protocolVersion) {
  RINGGUARD_RETURN_IF_ERROR(postPeerHandshake(transport, peer, options, protocolVersion));
  return finishPeerHandshake(transport, peer, options, aborted, protocolVersion);
}

}  // namespace ringguard
