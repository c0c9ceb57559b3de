#pragma once
// The control channel: small messages (fingerprints, verdict lists, errors, the handshake) addressed by
// (peer, tag), separate from the data plane (docs/design/protocol.md, "Control channel"). The public
// send/probe are non-virtual and seal every frame (magic, tag, sender, receiver, a sequence number per
// (peer, tag), length, CRC-32 of header and body); probe rejects a damaged, misaddressed, stale,
// duplicated or out-of-order frame with a kTransportError naming the peer and what was wrong. Safe for
// concurrent use.
// Implementations override protected hooks that move the sealed bytes, so no transport can deliver an
// unchecked control message (spdlog's base_sink pattern, as Transport does for slices).
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

struct Counters;
class FaultInjector;

// Control-channel message kinds (the tag of a frame).
enum class ControlTag : uint16_t { kFingerprint = 1, kVerdict = 2, kError = 3, kHandshake = 4 };
inline constexpr int kNumControlTags = 5;    // tags are < this
const char* controlTagName(ControlTag tag);  // "fingerprint", "verdict", "error", "handshake"

inline constexpr uint32_t kControlFrameMagic = 0x31434752;  // "RGC1": also the frame format's version

// Wire header of a sealed frame, followed by `length` body bytes (little-endian host order).
struct ControlFrameHeader {
  uint32_t magic;
  uint16_t tag;
  uint16_t reserved;  // 0
  int32_t sender;
  int32_t receiver;
  uint64_t seq;     // frames sender -> receiver with this tag sent before this one
  uint32_t length;  // body bytes
  uint32_t crc;     // CRC-32 of the 28 header bytes before it, continued over the body
};
static_assert(sizeof(ControlFrameHeader) == 32, "control frame header is a fixed wire format");

// A sealed frame of `bytes` at `body` (what ControlChannel::send hands its hook).
std::vector<uint8_t> sealControlFrame(ControlTag tag, int sender, int receiver, uint64_t seq,
                                      const void* body, size_t bytes);
// The checks ControlChannel::probe applies to a raw frame of `bytes` at `frame` that arrived from rank
// `from` with `tag` on rank `receiver`, which expects sequence number `expectedSeq` next: OK with the body
// in *message, or a kTransportError naming the frame and what was wrong (damaged, truncated, wrong length,
// bad magic, misaddressed, stale, out of order); *message is untouched then. Keeps no state (the channel
// numbers the frames), so it can be driven alone (tests/fuzz/fuzz_control_frame.cc).
Status openControlFrame(const uint8_t* frame, size_t bytes, ControlTag tag, int from, int receiver,
                        uint64_t expectedSeq, std::vector<uint8_t>* message);

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Seals `bytes` at `data` into one frame to `peer` (any rank, this one included) and hands it to the
  // implementation; does not wait for the receiver. Adds the frame to counters->controlFrames and
  // controlBytes when `counters` is given.
  Status send(int peer, ControlTag tag, const void* data, size_t bytes, Counters* counters = nullptr);

  // Takes one pending frame with `tag` from `peer` (any peer when peer < 0), if there is one, and checks
  // it before anything of it is returned: *got = true with the body in *message and its sender in *from.
  // A frame that fails a check is a kTransportError ("control frame <tag> #<seq> from rank 2 rejected on
  // rank 0: CRC mismatch"); the channel from that peer is unusable after it. `injector` (fault mode
  // control) may damage the frame first, as a bad link would; injections and rejections go to
  // counters->injected and detected.
  Status probe(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from, bool* got,
               const FaultInjector* injector = nullptr, Counters* counters = nullptr);

  // probe for a frame whose damage the caller repairs (a small collective's payload travels in its
  // fingerprint frame: docs/design/protocol.md, "Small collectives in one round"): a frame that fails only
  // its CRC is taken and reported as *damaged (with *got, *from and counters->detected) instead of as an
  // error; every other rejection (truncated, misaddressed, stale, out of order) is still an error.
  Status probeRepairable(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from, bool* got,
                         bool* damaged, const FaultInjector* injector = nullptr,
                         Counters* counters = nullptr);

 protected:
  ControlChannel(int rank, int size);

  // Moves one sealed frame to `peer`. Frames of one (peer, tag) must arrive in the order they were sent.
  virtual Status doSend(int peer, ControlTag tag, const void* frame, size_t bytes) = 0;
  // Takes one raw frame that arrived with `tag` from `peer` (any when peer < 0), if any, and says which
  // rank it came from (as the implementation knows it: MPI's source, the queue it was filed in).
  virtual Status doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got) = 0;

 private:
  Status checkPeer(int peer, const char* what) const;
  Status open(int from, ControlTag tag, std::vector<uint8_t>* frame, std::vector<uint8_t>* message) const;
  // probe and probeRepairable (damaged null: every rejection is an error).
  Status take(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from, bool* got, bool* damaged,
              const FaultInjector* injector, Counters* counters);

  int rank_;
  int size_;
  // Threads may send and probe at once (point-to-point lanes share a channel: peer_lanes.h): each side's
  // numbering is under a lock of its own.
  std::mutex sendMutex_, probeMutex_;
  std::vector<uint64_t> sent_;      // [peer * kNumControlTags + tag]: next sequence number to send
  std::vector<uint64_t> received_;  // [peer * kNumControlTags + tag]: next sequence number expected
};

}  // namespace ringguard
