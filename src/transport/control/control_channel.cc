#include "transport/control/control_channel.h"

#include <cstring>
#include <sstream>
#include <string>

#include "core/fault_injector.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {

constexpr size_t kCrcCovered = offsetof(ControlFrameHeader, crc);

uint32_t frameCrc(const ControlFrameHeader& h, const uint8_t* body, size_t bytes) {
  return crc32(body, bytes, crc32(&h, kCrcCovered));
}

bool validTag(ControlTag tag) { return int(tag) > 0 && int(tag) < kNumControlTags; }

}  // namespace

const char* controlTagName(ControlTag tag) {
  switch (tag) {
    case ControlTag::kFingerprint:
      return "fingerprint";
    case ControlTag::kVerdict:
      return "verdict";
    case ControlTag::kError:
      return "error";
    case ControlTag::kHandshake:
      return "handshake";
  }
  return "invalid";
}

std::vector<uint8_t> sealControlFrame(ControlTag tag, int sender, int receiver, uint64_t seq,
                                      const void* body, size_t bytes) {
  ControlFrameHeader h{};
  h.magic = kControlFrameMagic;
  h.tag = uint16_t(tag);
  h.sender = sender;
  h.receiver = receiver;
  h.seq = seq;
  h.length = uint32_t(bytes);
  h.crc = frameCrc(h, static_cast<const uint8_t*>(body), bytes);
  std::vector<uint8_t> frame;
  frame.reserve(sizeof(h) + bytes);
  frame.insert(frame.end(), reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h + 1));
  if (bytes)
    frame.insert(frame.end(), static_cast<const uint8_t*>(body), static_cast<const uint8_t*>(body) + bytes);
  return frame;
}

ControlChannel::ControlChannel(int rank, int size)
    : rank_(rank),
      size_(size),
      sent_(size_t(size) * kNumControlTags, 0),
      received_(size_t(size) * kNumControlTags, 0) {}

Status ControlChannel::checkPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": peer " + std::to_string(peer) +
                                                    " is outside [0, " + std::to_string(size_) + ")");
  }
  return Status::ok();
}

Status ControlChannel::send(int peer, ControlTag tag, const void* data, size_t bytes, Counters* counters) {
  RINGGUARD_RETURN_IF_ERROR(checkPeer(peer, "control send"));
  RINGGUARD_ENFORCE(validTag(tag), "control send: invalid tag");
  if (bytes > UINT32_MAX - sizeof(ControlFrameHeader)) {
    return Status(StatusCode::kInvalidArgument,
                  "control send: a message of " + std::to_string(bytes) + " bytes is too large for a frame");
  }
  std::lock_guard<std::mutex> lock(sendMutex_);  // numbered and handed on in one order
  uint64_t& seq = sent_[size_t(peer) * kNumControlTags + size_t(tag)];
  std::vector<uint8_t> frame = sealControlFrame(tag, rank_, peer, seq, data, bytes);
  RINGGUARD_RETURN_IF_ERROR(doSend(peer, tag, frame.data(), frame.size()));
  ++seq;
  if (counters != nullptr) {
    counters->controlFrames++;
    counters->controlBytes += frame.size();
  }
  return Status::ok();
}

// Checks in the order that names the real cause: a damaged frame (CRC over everything) before a frame
// that is intact but not the one expected (misaddressed, stale, duplicated, a gap).
Status openControlFrame(const uint8_t* frame, size_t bytes, ControlTag tag, int from, int receiver,
                        uint64_t expectedSeq, std::vector<uint8_t>* message) {
  auto reject = [&](const std::string& why) {
    std::ostringstream os;
    os << "control frame " << controlTagName(tag) << " #" << expectedSeq << " from rank " << from
       << " rejected on rank " << receiver << ": " << why;
    return Status(StatusCode::kTransportError, os.str());
  };
  if (bytes < sizeof(ControlFrameHeader)) {
    return reject("truncated (" + std::to_string(bytes) + " bytes, a header has " +
                  std::to_string(sizeof(ControlFrameHeader)) + ")");
  }
  ControlFrameHeader h;
  std::memcpy(&h, frame, sizeof(h));
  const size_t body = bytes - sizeof(h);
  if (h.crc != frameCrc(h, frame + sizeof(h), body)) return reject("CRC mismatch (damaged in transit)");
  if (h.length != body) {
    return reject("length field says " + std::to_string(h.length) + " bytes, " + std::to_string(body) +
                  " arrived");
  }
  if (h.magic != kControlFrameMagic) return reject("not a control frame of this format (bad magic)");
  // Senders write 0: anything else is another format under the same magic, not something to ignore.
  if (h.reserved != 0) {
    return reject("not a control frame of this format (reserved field " + std::to_string(h.reserved) +
                  ", expected 0)");
  }
  if (h.tag != uint16_t(tag) || h.sender != from || h.receiver != receiver) {
    std::ostringstream os;
    os << "misaddressed (tag " << h.tag << ", rank " << h.sender << " -> rank " << h.receiver << ")";
    return reject(os.str());
  }
  if (h.seq != expectedSeq) {
    return reject(h.seq < expectedSeq ? "stale or duplicated (sequence number " + std::to_string(h.seq) + ")"
                                      : "out of order: sequence number " + std::to_string(h.seq) +
                                            " arrived first (a frame was lost)");
  }
  message->assign(frame + sizeof(h), frame + bytes);
  return Status::ok();
}

Status ControlChannel::open(int from, ControlTag tag, std::vector<uint8_t>* frame,
                            std::vector<uint8_t>* message) const {
  return openControlFrame(frame->data(), frame->size(), tag, from, rank_,
                          received_[size_t(from) * kNumControlTags + size_t(tag)], message);
}

Status ControlChannel::probe(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from, bool* got,
                             const FaultInjector* injector, Counters* counters) {
  return take(peer, tag, message, from, got, nullptr, injector, counters);
}

Status ControlChannel::probeRepairable(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from,
                                       bool* got, bool* damaged, const FaultInjector* injector,
                                       Counters* counters) {
  *damaged = false;
  return take(peer, tag, message, from, got, damaged, injector, counters);
}

Status ControlChannel::take(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from, bool* got,
                            bool* damaged, const FaultInjector* injector, Counters* counters) {
  *got = false;
  if (peer >= 0) RINGGUARD_RETURN_IF_ERROR(checkPeer(peer, "control probe"));
  RINGGUARD_ENFORCE(validTag(tag), "control probe: invalid tag");
  std::lock_guard<std::mutex> lock(probeMutex_);  // taken and checked in one order
  std::vector<uint8_t> frame;
  int src = -1;
  bool arrived = false;
  RINGGUARD_RETURN_IF_ERROR(doProbe(peer, tag, &frame, &src, &arrived));
  if (!arrived) return Status::ok();
  if (src < 0 || src >= size_ || (peer >= 0 && src != peer)) {
    return Status(StatusCode::kInternal,
                  "control probe: the transport reported sender " + std::to_string(src));
  }
  uint64_t& expected = received_[size_t(src) * kNumControlTags + size_t(tag)];
  // Fault injection on the receiving side, before the check, as a bad link would damage the frame. The
  // decision keys on the sequence number this rank expects, so it replays exactly.
  bool injected = false;
  if (injector != nullptr && injector->corruptsControl(expected, int(tag), src, rank_)) {
    injected = injector->corruptControl(expected, int(tag), src, rank_, frame.data(), frame.size());
    if (injected && counters != nullptr) counters->injected++;
  }
  // Whether only the CRC failed: the frame arrived whole from `src` (the transport's word) and was damaged.
  auto onlyCrcFails = [&] {
    if (frame.size() < sizeof(ControlFrameHeader)) return false;
    ControlFrameHeader h;
    std::memcpy(&h, frame.data(), sizeof(h));
    return h.crc != frameCrc(h, frame.data() + sizeof(h), frame.size() - sizeof(h));
  };
  Status st = open(src, tag, &frame, message);
  if (!st.isOk()) {
    if (counters != nullptr) counters->detected++;
    if (damaged == nullptr || !onlyCrcFails()) return st;
    *damaged = true;  // taken: the sender sends it again when the verdicts say so
  } else if (injected && counters != nullptr) {
    counters->escaped++;  // a CRC-32 misses no single bit flip
  }
  ++expected;
  *from = src;
  *got = true;
  return Status::ok();
}

}  // namespace ringguard
