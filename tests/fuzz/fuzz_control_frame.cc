// Control-frame decoding (transport/control_channel.h, openControlFrame): any bytes as a frame that arrived
// from `from` with `tag` on `receiver`, which expects sequence number `expected`. Input: tag (uint16), from,
// receiver (int32), expected (uint64), a mode byte, a bit index (uint32), then the frame. Mode bit 0 re-seals
// the frame's CRC (the fuzzer cannot forge a CRC-32, and the checks behind it are the interesting ones);
// bit 1 seals the rest of the input as a body the way a sender does and checks it opens, and that any one
// bit flipped does not.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "ringguard/core/crc32.h"
#include "transport/control/control_channel.h"

using namespace ringguard;
using ringguard::fuzz::FuzzInput;

namespace {

constexpr size_t kHeader = sizeof(ControlFrameHeader);

void checkOpen(const std::vector<uint8_t>& frame, ControlTag tag, int from, int receiver, uint64_t expected) {
  std::vector<uint8_t> message = {0xAB};
  const Status st = openControlFrame(frame.data(), frame.size(), tag, from, receiver, expected, &message);
  if (!st.isOk()) {
    RINGGUARD_FUZZ_CHECK(st.code() == StatusCode::kTransportError);
    RINGGUARD_FUZZ_CHECK(st.message().find("rejected on rank " + std::to_string(receiver)) !=
                         std::string::npos);
    RINGGUARD_FUZZ_CHECK(message.size() == 1 && message[0] == 0xAB);  // untouched
    return;
  }
  // Accepted: exactly the frame a sender of this (tag, from, receiver, seq) makes for that body.
  RINGGUARD_FUZZ_CHECK(frame.size() >= kHeader);
  RINGGUARD_FUZZ_CHECK(message.size() == frame.size() - kHeader);
  RINGGUARD_FUZZ_CHECK(message.empty() ||
                       std::memcmp(message.data(), frame.data() + kHeader, message.size()) == 0);
  const std::vector<uint8_t> resealed =
      sealControlFrame(tag, from, receiver, expected, message.data(), message.size());
  RINGGUARD_FUZZ_CHECK(resealed == frame);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const auto tag = static_cast<ControlTag>(in.take<uint16_t>());
  const int from = in.take<int32_t>();
  const int receiver = in.take<int32_t>();
  const uint64_t expected = in.take<uint64_t>();
  const uint8_t mode = in.take<uint8_t>();
  const uint32_t bit = in.take<uint32_t>();
  std::vector<uint8_t> frame(in.data(), in.data() + in.size());

  RINGGUARD_FUZZ_CHECK(controlTagName(tag) != nullptr);
  if ((mode & 1) && frame.size() >= kHeader) {
    ControlFrameHeader h;
    std::memcpy(&h, frame.data(), kHeader);
    h.crc =
        crc32(frame.data() + kHeader, frame.size() - kHeader, crc32(&h, offsetof(ControlFrameHeader, crc)));
    std::memcpy(frame.data(), &h, kHeader);
  }
  checkOpen(frame, tag, from, receiver, expected);

  if (mode & 2) {
    const std::vector<uint8_t> body(in.data(), in.data() + in.size());
    std::vector<uint8_t> sealed = sealControlFrame(tag, from, receiver, expected, body.data(), body.size());
    std::vector<uint8_t> message;
    RINGGUARD_FUZZ_CHECK(
        openControlFrame(sealed.data(), sealed.size(), tag, from, receiver, expected, &message).isOk());
    RINGGUARD_FUZZ_CHECK(message == body);
    const size_t b = bit % (sealed.size() * 8);
    sealed[b / 8] ^= uint8_t(1u << (b % 8));
    RINGGUARD_FUZZ_CHECK(
        !openControlFrame(sealed.data(), sealed.size(), tag, from, receiver, expected, &message).isOk());
    // Truncated by any amount: rejected too.
    sealed[b / 8] ^= uint8_t(1u << (b % 8));
    const size_t cut = 1 + bit % sealed.size();
    RINGGUARD_FUZZ_CHECK(
        !openControlFrame(sealed.data(), sealed.size() - cut, tag, from, receiver, expected, &message)
             .isOk());
  }
  return 0;
}
