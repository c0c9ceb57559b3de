// A peer's window part table entry (transport/window.h, partReadable): any entry, for any window size and
// group size, against any expected part size. Input: capacity (uint32), ranks (uint8), expected bytes
// (uint64), then the entry {offset, bytes, firstChunk, address} (uint64 each). An accepted entry must name
// bytes and chunks that lie inside the window, whatever the values (no overflow lets one through); an
// address (a single-copy read's source in the publisher's process) is asked of the kernel only as a range
// that does not wrap. The same input
// checks the send/recv slots (window_sendrecv.h): a message size slotFits accepts lies inside its slot, and
// every slot and acknowledgement inside the window.
#include <cstdint>

#include "fuzz_util.h"
#include "transport/window.h"

using namespace ringguard;
using ringguard::fuzz::FuzzInput;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const size_t capacity = in.take<uint32_t>() % (size_t(64) << 20);
  const int ranks = 2 + in.take<uint8_t>() % 63;
  const uint64_t expected = in.take<uint64_t>();
  PartEntry p;
  p.offset = in.take<uint64_t>();
  p.bytes = in.take<uint64_t>();
  p.firstChunk = in.take<uint64_t>();
  p.address = in.take<uint64_t>();
  const WindowLayout l = WindowLayout::of(capacity, ranks);
  RINGGUARD_FUZZ_CHECK(l.dataAt % 64 == 0 && l.halfBytes % 64 == 0 && l.capacity >= capacity);
  RINGGUARD_FUZZ_CHECK(l.slotCapacity <= l.capacity && l.slotCapacity <= kWindowSlotBytes);
  RINGGUARD_FUZZ_CHECK(l.slotsAt >= sizeof(WindowHeader) + 2 * l.halfBytes && l.slotsAt % 64 == 0);
  RINGGUARD_FUZZ_CHECK(l.slotBytes >= sizeof(SlotHeader) + l.slotCapacity && l.slotBytes % 64 == 0);
  RINGGUARD_FUZZ_CHECK(l.acksAt == l.slotsAt + size_t(ranks) * l.slotBytes);
  RINGGUARD_FUZZ_CHECK(l.bytes == l.acksAt + size_t(ranks) * sizeof(SlotAck));
  if (slotFits(l, size_t(expected))) RINGGUARD_FUZZ_CHECK(expected <= l.slotBytes - sizeof(SlotHeader));
  if (sourceReadable(p.address, size_t(expected))) {
    RINGGUARD_FUZZ_CHECK(p.address != 0 && p.address + expected >= p.address);
  }
  if (!partReadable(l, p, size_t(expected))) return 0;
  RINGGUARD_FUZZ_CHECK(p.bytes == expected);
  // The last byte and the last chunk the reader touches are inside the half.
  RINGGUARD_FUZZ_CHECK(p.offset + p.bytes <= l.capacity);
  RINGGUARD_FUZZ_CHECK(p.firstChunk + l.chunksOf(size_t(p.bytes)) <= l.maxChunks);
  return 0;
}
