#pragma once
// Windows: memory every rank of a group can read, each rank's written by its owner only (the one-sided
// protocol on host memory: docs/design/protocol.md, "The one-sided protocol on host shared memory"). A
// transport that has them (shared memory: a region of each rank's segment) hands them to the collectives,
// which publish into their own window and read their peers'. Layout of one rank's window:
//
//   WindowHeader | half 0: HalfHeader, PartEntry[size], ChunkEntry[maxChunks], data[capacity] | half 1
//   | Slot[size]: SlotHeader, data[slotCapacity] | SlotAck[size]
//
// A publication is up to `size` parts (byte ranges of the data, each split into chunks); the part table
// says, for every reading rank, which part is its own: one part shared by every reader (all-reduce,
// all-gather, broadcast) or one per reader (reduce-scatter, all-to-all).
// A collective with epoch e (the window's own count of one-sided collectives, from 1) uses half e & 1.
// Send/recv (algorithms/window_sendrecv.h) use the slots: slot d of rank s's window holds s's message to
// rank d (one at a time: the send returns once d acknowledged it), SlotAck s of rank d's window says which
// of s's messages d took (or failed to). Slots and acknowledgements count by the pair's message number, not
// by the collectives' epoch.
// Everything a peer wrote is read as untrusted: epochs are compared for equality, chunk entries are
// trailers checked like ring slices, the fingerprint carries its CRC, a part table entry is bounds-checked
// (partReadable) before any byte it names is read, and a peer's error text is read within its bounds.
// Single-copy reads (docs/design/protocol.md, "Single-copy read"): where the transport can read a peer's
// process memory (Windows::crossRead), a publisher may leave a large part's bytes in its own buffer and
// publish their address instead (PartEntry::address, SlotHeader::address); readers copy them straight into
// their output with the length their own arguments give, and check each chunk's CRC as for window bytes.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/copy_bytes.h"
#include "core/fingerprint.h"
#include "core/stream_copy.h"
#include "core/trailer.h"
#include "ringguard/core/status.h"

namespace ringguard {

// Bytes of one chunk: the unit a reader waits for, verifies and re-reads (a publication of several chunks
// is read while it is written).
inline constexpr size_t kWindowChunkBytes = size_t(16) << 10;

inline constexpr size_t kWindowWhyBytes = 512;  // WindowHeader::why, NUL included

struct alignas(64) WindowHeader {
  std::atomic<uint64_t> done;  // the last epoch whose reads of every peer's half this rank finished
  // The epoch whose reads failed here (a chunk corrupt on every re-read, a part whose size is not the one
  // this rank expects), stored (release) once `code` and `why` (NUL-terminated) hold the error: every rank
  // of the collective returns the first failed rank's.
  alignas(64) std::atomic<uint64_t> failed;
  uint32_t code;  // StatusCode
  char why[kWindowWhyBytes];
};

// What a half says of its collective, sealed by a CRC (a reader that finds it damaged reads it again).
struct HalfSeal {
  Fingerprint fingerprint;
  uint32_t declined;  // 1: this rank's payload does not fit (all-to-all), so nobody's travels here
  uint32_t crc;       // crc32 of the bytes before it
};

struct alignas(64) HalfHeader {
  std::atomic<uint64_t> epoch;  // stored (release) once the seal and the part table are written
  HalfSeal seal;
};

// Reader r's part of a publication. Read from a peer, so bounds-checked before use (readers also compare
// `bytes` with what the agreed arguments say it must be).
struct PartEntry {
  uint64_t offset;  // in the half's data
  uint64_t bytes;
  uint64_t firstChunk;  // its chunks are firstChunk .. firstChunk + chunksOf(bytes) - 1
  // 0: the bytes are in the window at `offset`; else where they lie in the publisher's process (a
  // single-copy read: the publisher's buffer, valid until every reader settled)
  uint64_t address;
};

struct alignas(64) ChunkEntry {
  std::atomic<uint64_t> epoch;  // stored (release) once the chunk's bytes and trailer are written
  Trailer trailer;              // the chunk as a ring slice: seq, step 0, slice = chunk, column = owner
};

// The largest message a slot holds (a larger one keeps the two-sided path), unless the window is smaller.
inline constexpr size_t kWindowSlotBytes = size_t(64) << 10;

// What a slot says of its message, sealed by a CRC (a reader that finds it damaged reads it again). The
// payload's length is not in it: a reader reads the size its own arguments give (once the fingerprint, which
// carries count and dtype, matched), never one a peer wrote.
struct SlotSeal {
  Fingerprint fingerprint;
  uint32_t pad;
  uint32_t crc;  // crc32 of the bytes before it
};

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> message;  // the message number + 1, stored (release) once seal, trailer, data are in
  SlotSeal seal;
  Trailer trailer;  // the payload as a ring slice: seq = message number, step 0, slice 0, column = sender
  // 0: the payload is in the slot's data; else where it lies in the sender's process (single-copy read:
  // the sender's buffer, valid until the receiver acknowledged)
  uint64_t address;
};

// In the receiver's window, one per sender: the last of the sender's messages it took intact (`message`,
// number + 1), or the one it failed (`failed`, stored once code and why hold the error, which the sender
// returns as its own: both ends of a failed message return the same error).
struct alignas(64) SlotAck {
  std::atomic<uint64_t> message;
  std::atomic<uint64_t> failed;
  uint32_t code;  // StatusCode
  char why[kWindowWhyBytes];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "windows need lock-free 64-bit atomics");

// Where things are in a window of `capacity` payload bytes per half for a group of `size` ranks.
struct WindowLayout {
  size_t capacity = 0;
  size_t maxChunks = 0;  // ceil(capacity / chunk) + size: a publication of up to `size` parts
  int size = 0;          // ranks: entries of the part table
  size_t halfBytes = 0;
  size_t bytes = 0;                 // the whole window
  size_t chunksAt = 0, dataAt = 0;  // offsets in a half
  size_t slotCapacity = 0;          // payload bytes of a send/recv slot
  size_t slotBytes = 0;             // one slot: SlotHeader and its data
  size_t slotsAt = 0, acksAt = 0;   // offsets in the window

  static WindowLayout of(size_t capacity, int size);
  size_t chunksOf(size_t partBytes) const { return (partBytes + kWindowChunkBytes - 1) / kWindowChunkBytes; }
};

// Whether a part entry read from a peer's window can be read as `bytes` (what the agreed arguments say this
// rank's part holds): the size matches, and the bytes and chunks lie within the window (no overflow). The
// one check between a peer's table and this rank's reads (tests/fuzz/fuzz_window_part.cc).
inline bool partReadable(const WindowLayout& l, const PartEntry& p, size_t bytes) {
  return p.bytes == bytes && p.offset <= l.capacity && p.bytes <= l.capacity - p.offset &&
         p.firstChunk <= l.maxChunks && l.chunksOf(bytes) <= l.maxChunks - p.firstChunk;
}

// Whether a message of `bytes` (what this rank's own arguments say) fits a slot. The one bound between a
// slot and this rank's reads: nothing read from the slot sizes them (tests/fuzz/fuzz_window_part.cc checks
// the layout around it).
inline bool slotFits(const WindowLayout& l, size_t bytes) { return bytes <= l.slotCapacity; }

// Whether `bytes` at `address`, published by a peer as where its payload lies in its process, can be asked
// of the kernel: a non-null address whose range does not wrap. Whether the range is mapped in that process
// is the kernel's to say (a read of a bad range fails, it never touches this process's memory); the length
// is always this rank's own (tests/fuzz/fuzz_window_part.cc).
inline bool sourceReadable(uint64_t address, size_t bytes) {
  return address != 0 && uint64_t(bytes) <= UINT64_MAX - address;
}

// A single-copy read: `bytes` at `address` in rank r's process into `dst` (this process's), or a
// kTransportError naming r.
using CrossRead = std::function<Status(int r, uint64_t address, void* dst, size_t bytes)>;

// Every rank's window of one group, mapped in this process.
class Windows {
 public:
  // base[r]: rank r's window (this rank's own at base[rank]); `wake(r)` rings rank r's doorbell.
  // `crossRead` (may be empty: none) reads a peer's process memory; this rank publishes large payloads by
  // address instead of copying them into its window, from `singleCopyBytes` (> 0; 0: never) on.
  // `coresOfTheirOwn`: every rank of the group has a core of its own (a wait then polls a few microseconds
  // before it first yields its core). `streamCopies`: copies into this rank's window use non-temporal stores
  // (core/stream_copy.h), which can pay only where the ranks have cores of their own (the reader is on
  // another core; where ranks share cores, it often runs on the writer's core next and finds the bytes in its
  // cache) and, even there, only on some machines (transport/shm/stream_store_choice.h).
  Windows(int rank, const WindowLayout& layout, std::vector<uint8_t*> base, std::function<void(int)> wake,
          CrossRead crossRead = nullptr, size_t singleCopyBytes = 0, bool coresOfTheirOwn = false,
          bool streamCopies = false)
      : rank_(rank),
        layout_(layout),
        base_(std::move(base)),
        wake_(std::move(wake)),
        crossRead_(std::move(crossRead)),
        singleCopyBytes_(crossRead_ ? singleCopyBytes : 0),
        coresOfTheirOwn_(coresOfTheirOwn),
        streamCopies_(streamCopies) {}

  int rank() const { return rank_; }
  int size() const { return int(base_.size()); }
  const WindowLayout& layout() const { return layout_; }
  // The epoch of this rank's next one-sided collective (every rank counts alike: they route alike).
  uint64_t nextEpoch() { return ++epoch_; }

  WindowHeader& header(int r) const { return *reinterpret_cast<WindowHeader*>(base_[size_t(r)]); }
  HalfHeader& half(int r, uint64_t epoch) const { return *reinterpret_cast<HalfHeader*>(halfBase(r, epoch)); }
  PartEntry& part(int r, uint64_t epoch, int reader) const {
    return reinterpret_cast<PartEntry*>(halfBase(r, epoch) + sizeof(HalfHeader))[reader];
  }
  ChunkEntry& chunk(int r, uint64_t epoch, size_t k) const {
    return reinterpret_cast<ChunkEntry*>(halfBase(r, epoch) + layout_.chunksAt)[k];
  }
  uint8_t* data(int r, uint64_t epoch) const { return halfBase(r, epoch) + layout_.dataAt; }
  // Rank r's slot for its messages to rank `to`, and its data.
  SlotHeader& slot(int r, int to) const { return *reinterpret_cast<SlotHeader*>(slotBase(r, to)); }
  uint8_t* slotData(int r, int to) const { return slotBase(r, to) + sizeof(SlotHeader); }
  // Rank r's acknowledgements of the messages from rank `from`.
  SlotAck& ack(int r, int from) const {
    return reinterpret_cast<SlotAck*>(base_[size_t(r)] + layout_.acksAt)[from];
  }
  void wake(int r) const { wake_(r); }
  // Whether every rank of the group has a core of its own: a wait then polls a few microseconds before it
  // first yields its core (algorithms/window_wait.h).
  bool coreForEachRank() const { return coresOfTheirOwn_; }
  // Whether copies into this rank's window use non-temporal stores (agreed at setup).
  bool streamCopies() const { return streamCopies_; }
  // Copies `bytes` of this rank's payload into its own window (or slot), where peers read them next.
  void copyIn(void* dst, const void* src, size_t bytes) const {
    if (streamCopies_) {
      streamCopy(dst, src, bytes);
    } else {
      copyBytes(dst, src, bytes);
    }
  }

  // Whether peers' memory can be read (every rank of the group agreed at setup).
  bool crossReadable() const { return bool(crossRead_); }
  // Whether this rank publishes a send/recv message of `bytes` by address: from singleCopyBytes. A
  // collective's part (one its readers copy into their output, not read in place) only from twice that: its
  // chunks are read while later ones are copied into the window, which hides most of the copy a single-copy
  // read saves, and the kernel's read costs more than a copy (docs/PERFORMANCE.md, issue 45: a 64 KiB
  // broadcast at 2 ranks took 0.74x MPI through the window, 0.64x single-copy; a 64 KiB send/recv, whose
  // message is published whole, 0.58x and 0.73x).
  bool publishesMessageByAddress(size_t bytes) const {
    return singleCopyBytes_ > 0 && bytes >= singleCopyBytes_;
  }
  bool publishesPartByAddress(size_t bytes) const {
    return singleCopyBytes_ > 0 && bytes / 2 >= singleCopyBytes_;
  }
  Status crossRead(int r, uint64_t address, void* dst, size_t bytes) const {
    return crossRead_(r, address, dst, bytes);
  }

 private:
  uint8_t* halfBase(int r, uint64_t epoch) const {
    return base_[size_t(r)] + sizeof(WindowHeader) + size_t(epoch & 1) * layout_.halfBytes;
  }

  uint8_t* slotBase(int r, int to) const {
    return base_[size_t(r)] + layout_.slotsAt + size_t(to) * layout_.slotBytes;
  }

  const int rank_;
  const WindowLayout layout_;
  const std::vector<uint8_t*> base_;
  const std::function<void(int)> wake_;
  const CrossRead crossRead_;
  const size_t singleCopyBytes_;
  const bool coresOfTheirOwn_;
  const bool streamCopies_;
  uint64_t epoch_ = 0;
};

inline WindowLayout WindowLayout::of(size_t capacity, int size) {
  WindowLayout l;
  l.capacity = (capacity + 63) / 64 * 64;
  l.maxChunks = l.chunksOf(l.capacity) + size_t(size);
  l.size = size;
  l.chunksAt = (sizeof(HalfHeader) + size_t(size) * sizeof(PartEntry) + 63) / 64 * 64;
  l.dataAt = l.chunksAt + l.maxChunks * sizeof(ChunkEntry);
  l.halfBytes = l.dataAt + l.capacity;
  l.slotCapacity = std::min(kWindowSlotBytes, l.capacity);
  l.slotBytes = sizeof(SlotHeader) + (l.slotCapacity + 63) / 64 * 64;
  l.slotsAt = sizeof(WindowHeader) + 2 * l.halfBytes;
  l.acksAt = l.slotsAt + size_t(size) * l.slotBytes;
  l.bytes = l.acksAt + size_t(size) * sizeof(SlotAck);
  return l;
}

}  // namespace ringguard
