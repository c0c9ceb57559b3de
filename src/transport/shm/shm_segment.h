#pragma once
// One rank's shared-memory segment (POSIX shm_open + mmap): its doorbell and one inbound byte ring per peer,
// which that peer writes and this rank reads (docs/design/protocol.md, "Shared-memory transport").
//
//   header | data ring indices [size] | control ring indices [size] | data rings [size] | control rings
//   [size] | window (transport/window.h; none when windowBytes is 0)
//
// Each peer has two rings here: one for payloads and trailers (the data plane), one for sealed control
// frames, so a control frame never waits behind a slice.
// A ring is single-producer (the sender's thread posting on it), single-consumer (this rank's): the
// sender copies bytes in and publishes `head` (release), the receiver copies them out and publishes
// `tail`. Both are totals since the segment was made, so `head - tail` is what the ring holds. Whoever
// moves bytes rings the other side's doorbell, a futex word in that side's segment, which its waits sleep
// on. Nothing a peer writes here is trusted: indices are checked before use (ShmTransport), payloads carry
// their CRC.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ringguard/core/status.h"

namespace ringguard {
namespace shm {

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory rings need lock-free atomics");

struct alignas(64) RingIndex {
  std::atomic<uint64_t> value{0};
};

struct RingIndices {
  RingIndex head;  // bytes the sender has written, in total
  RingIndex tail;  // bytes the receiver has read, in total
};

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint64_t nonce;  // random, published through the bootstrap: proves a peer opened this very segment
  int32_t rank;
  int32_t size;
  uint64_t ringBytes;
  uint64_t controlRingBytes;
  uint64_t windowBytes;  // this rank's window for the one-sided protocol, 0: none
  alignas(
      64) std::atomic<uint32_t> doorbell;  // futex word: raised whenever something this rank waits on moved
  std::atomic<uint32_t> sleepers;          // threads of this rank blocked on it (a raise wakes only then)
};

// Names are unlinked once every peer has opened them, so only a process killed during that window (a
// SIGKILL, or torchrun's SIGTERM to a surviving rank) leaves one in /dev/shm. The first segment a process
// makes removes such leftovers first: a ringguard-<pid>-... name whose process no longer exists and that
// is older than `olderThan` (a live setup elsewhere, seen from another pid namespace, is younger).
void sweepStaleSegments(std::chrono::seconds olderThan);

class Segment {
 public:
  // A new segment of this rank (name unique: pid, a counter and random bits), reserved in full so a
  // full /dev/shm is an error here and never a SIGBUS later.
  static Status create(int rank, int size, size_t ringBytes, size_t controlRingBytes, size_t windowBytes,
                       std::unique_ptr<Segment>* out);
  // A peer's segment by the name it published; checks that it is the one that peer made (`nonce`).
  static Status open(const std::string& name, int rank, int size, uint64_t nonce,
                     std::unique_ptr<Segment>* out);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name (the mapping stays): once every peer has opened it, nothing is left behind if a
  // process dies. Idempotent; the creator's destructor calls it too.
  void unlink();

  const std::string& name() const { return name_; }
  uint64_t nonce() const { return header()->nonce; }
  // Where the nonce lies in this process: a peer that reads the same 8 bytes there with a single-copy read
  // knows it can read this process's memory (cross_memory.h, probeCrossMemory).
  uint64_t nonceAddress() const { return uint64_t(uintptr_t(&header()->nonce)); }
  size_t ringBytes() const { return ringBytes_; }
  // The rings `sender` (a peer of the owner, never the owner) writes.
  RingIndices& ring(int sender) const { return rings_[slot(sender)]; }
  uint8_t* data(int sender) const { return data_ + size_t(slot(sender)) * ringBytes_; }
  size_t controlRingBytes() const { return controlRingBytes_; }
  RingIndices& controlRing(int sender) const { return rings_[peers_ + slot(sender)]; }
  uint8_t* controlData(int sender) const { return control_ + size_t(slot(sender)) * controlRingBytes_; }
  // The owner's window (transport/window.h), windowBytes() long; null when it has none.
  size_t windowBytes() const { return windowBytes_; }
  uint8_t* window() const {
    return windowBytes_ == 0 ? nullptr : control_ + size_t(peers_) * controlRingBytes_;
  }

  // The doorbell: raise() after publishing bytes or space; wait(seen, max) blocks while it still reads
  // `seen`, at most `max`.
  uint32_t bell() const { return header()->doorbell.load(std::memory_order_seq_cst); }
  void raise();
  void wait(uint32_t seen, std::chrono::microseconds max);

 private:
  Segment(std::string name, void* base, size_t bytes, bool owner, int rank, int size, size_t ringBytes,
          size_t controlRingBytes, size_t windowBytes);
  int slot(int sender) const { return sender < rank_ ? sender : sender - 1; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }

  std::string name_;
  void* base_;
  size_t bytes_;
  bool linked_;
  int rank_;   // the owner's
  int peers_;  // size - 1: rings of each kind
  size_t ringBytes_;
  size_t controlRingBytes_;
  size_t windowBytes_;
  RingIndices* rings_;  // [2 * peers]: data rings, then control rings, by slot
  uint8_t* data_;
  uint8_t* control_;
};

}  // namespace shm
}  // namespace ringguard
