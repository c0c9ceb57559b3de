#pragma once
// The layout of one rank's peer window (docs/design/protocol.md, "The one-sided protocol"): shared by the
// host code that allocates and maps the windows (peer_window.cc) and the kernels that publish into their own
// window and read every peer's (cuda/peer/*.cu). One source, so both sides agree on every offset.
//
//   [0, kHeaderBytes)                 header: words the owner writes and peers read (done, error,
//                                     fingerprint) and the owner's private device state (seq, arrive), each
//                                     on its own 128-byte line
//   chunk table, 2 halves             one ChunkEntry per chunk: {epoch, crc, fingerprint}; written after
//                                     the chunk's bytes, epoch last with release order
//   result table, 2 halves            the same for chunks a rank publishes a second time in one collective
//                                     (the two-shot allreduce's reduced share, over its own input's bytes)
//   data, 2 halves                    the published bytes, chunk after chunk
//   send/recv channels                (size - 1) outgoing channels, one per destination, each two slots of
//                                     {chunk table, p2pBytes of data} (docs/design/protocol.md, "Send/recv");
//                                     none when p2pBytes is 0
//
// Collective e uses half e & 1. Before a rank overwrites half h at epoch e, every peer must have finished
// reading it at epoch e - 2: each rank's `done` word says which epoch it finished, so the producer waits
// for done >= e - 2 on every peer (normally already true: the acknowledgement is a flag, never a message).
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace ringguard {
namespace peer {

inline constexpr int kMaxRanks = 8;
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kLine = 128;
// Header word offsets (bytes).
// Epochs are 64-bit words (u64): they never wrap, so a zeroed entry (epoch 0) is never taken for a published
// one and `done >= e - 2` needs no modular arithmetic.
inline constexpr size_t kSeqOffset = 0 * kLine;          // owner only: last epoch this rank completed
inline constexpr size_t kArriveOffset = 1 * kLine;       // owner only: blocks of the running kernel done
inline constexpr size_t kDoneOffset = 2 * kLine;         // peers read: epoch whose reads this rank finished
inline constexpr size_t kErrorOffset = 3 * kLine;        // peers read word 0: nonzero once this rank failed;
                                                         // then peer, chunk, epoch (low), expected, seen,
                                                         // epoch (high): u32 words
inline constexpr size_t kFingerprintOffset = 4 * kLine;  // peers read: the running collective's fingerprint
inline constexpr size_t kCountersOffset = 5 * kLine;     // owner only: detected, injected, the values
                                                         // last copied to the host record, and 1 once the
                                                         // error was copied there (u64 each), and
                                                         // word kCallStartWord
// u64 word of the counters line: the timed call's start (%globaltimer ns), stored by the clock kernel
// launched before it and read by the one launched after it, while the timeline is on
// (cuda/peer/call_clock.cu).
inline constexpr size_t kCallStartWord = 5;
// Peers read: per half h, at kArrivalOffset + 64 h, {epoch (u64), fingerprint crc (u32, at +8)} of the
// collective that runs on h (epoch last, release). Every rank checks every peer's, so ranks that ran
// different collectives fail even when one of them reads nothing.
inline constexpr size_t kArrivalOffset = 6 * kLine;
inline constexpr size_t kArrivalFingerprint = 8;
// Legacy CUDA IPC windows only (transport/peer/peer_window.h): u32 word r is set by rank r when it has closed
// its mapping of this window, so the owner frees it only after every importer did (freeing an exported
// allocation still open elsewhere is undefined behaviour).
inline constexpr size_t kClosedOffset = 8 * kLine;
inline constexpr int kFingerprintWords = 8;

// Send/recv (docs/design/protocol.md, "Send/recv"): words of the channels, which only the two ends of a pair
// touch and no collective does. Owner only: u32 at +0, blocks of the running send/recv kernel done; u32 at
// +8 + 4 s, receiving warps done with the round in slot s.
inline constexpr size_t kP2pStateOffset = 9 * kLine;
// Owner only, u64 each, indexed by the peer: messages sent to it, rounds sent to it, messages received from
// it, rounds received from it (device-kept, so a replayed graph numbers its messages afresh).
inline constexpr size_t kP2pCountersOffset = 10 * kLine;  // two lines
inline constexpr int kP2pMessagesSent = 0, kP2pRoundsSent = kMaxRanks, kP2pMessagesReceived = 2 * kMaxRanks,
                     kP2pRoundsReceived = 3 * kMaxRanks;
// Peers read: u64 per source, the last round this rank finished reading from it (the acknowledgement of
// the sender's slot), in round order.
inline constexpr size_t kAckOffset = 12 * kLine;
// The rendezvous: entry [peer][message & 1] of {number (last, release), count, fingerprint crc}.
// `posted`: the receiver's, per source, written when its receive starts; `offered`: the sender's, per
// destination, written when its send starts. Each end checks the other's entry of the same message.
struct MessageEntry {
  uint64_t number;  // the message's number on its channel (1, 2, ...), written last with release order
  uint64_t count;   // elements
  uint32_t fingerprint;
  uint32_t reserved[3];
};
static_assert(sizeof(MessageEntry) == 32, "two entries per peer in a 64-byte pair");
inline constexpr size_t kPostedOffset = 13 * kLine;   // four lines
inline constexpr size_t kOfferedOffset = 17 * kLine;  // four lines
RINGGUARD_HOST_DEVICE inline constexpr size_t messageEntryOffset(size_t base, int peer, uint64_t message) {
  return base + (size_t(peer) * 2 + size_t(message & 1u)) * sizeof(MessageEntry);
}
static_assert(kOfferedOffset + 2 * kMaxRanks * sizeof(MessageEntry) <= kHeaderBytes, "the header holds them");

// A chunk is what one warp publishes and verifies: 32 lanes x kLaneVectors 16-byte vectors.
inline constexpr int kLaneVectors = 2;
inline constexpr size_t kChunkBytes = 32 * 16 * kLaneVectors;

struct ChunkEntry {
  uint64_t epoch;        // written last (release): the chunk's bytes, crc and fingerprint are visible
  uint32_t crc;          // CRC-32 (ISO-HDLC, as core/crc32.h) of the chunk's kChunkBytes, zero padded
  uint32_t fingerprint;  // CRC-32 of the collective's fingerprint words: readers compare it with their own
};
static_assert(sizeof(ChunkEntry) == 16, "one 16-byte entry per chunk");

// Where things are in a window able to hold `capacity` payload bytes per half.
struct WindowLayout {
  size_t capacity = 0;   // payload bytes per half (a multiple of kChunkBytes)
  size_t maxChunks = 0;  // capacity / kChunkBytes
  size_t tableOffset[2] = {0, 0};
  size_t resultTableOffset[2] = {0, 0};
  size_t dataOffset[2] = {0, 0};
  // Send/recv channels: p2pChannels (size - 1, or 0 when p2pBytes is 0) outgoing channels of two slots, each
  // a chunk table of p2pChunks entries (p2pTableBytes, whole lines) and p2pBytes of data.
  size_t p2pBytes = 0;  // payload bytes per slot (a multiple of kChunkBytes)
  size_t p2pChunks = 0;
  int p2pChannels = 0;
  size_t p2pOffset = 0;
  size_t p2pTableBytes = 0;
  size_t p2pSlotStride = 0;  // table + data
  size_t bytes = 0;          // the whole window, before rounding to the allocation granularity
};

RINGGUARD_HOST_DEVICE inline size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// `ranks` and `p2pBytes`: the send/recv channels (none for 0 bytes or one rank).
RINGGUARD_HOST_DEVICE inline WindowLayout makeWindowLayout(size_t capacity, size_t p2pBytes = 0,
                                                           int ranks = 1) {
  WindowLayout l;
  l.capacity = roundUp(capacity, kChunkBytes);
  l.maxChunks = l.capacity / kChunkBytes;
  const size_t table = roundUp(l.maxChunks * sizeof(ChunkEntry), kLine);
  l.tableOffset[0] = kHeaderBytes;
  l.tableOffset[1] = kHeaderBytes + table;
  l.resultTableOffset[0] = kHeaderBytes + 2 * table;
  l.resultTableOffset[1] = kHeaderBytes + 3 * table;
  l.dataOffset[0] = kHeaderBytes + 4 * table;
  l.dataOffset[1] = l.dataOffset[0] + l.capacity;
  l.p2pOffset = l.dataOffset[1] + l.capacity;
  if (p2pBytes != 0 && ranks > 1) {
    l.p2pBytes = roundUp(p2pBytes, kChunkBytes);
    l.p2pChunks = l.p2pBytes / kChunkBytes;
    l.p2pChannels = ranks - 1;
    l.p2pTableBytes = roundUp(l.p2pChunks * sizeof(ChunkEntry), kLine);
    l.p2pSlotStride = l.p2pTableBytes + l.p2pBytes;
  }
  l.bytes = l.p2pOffset + size_t(l.p2pChannels) * 2 * l.p2pSlotStride;
  return l;
}

// Rank `owner`'s outgoing channel to `dst` (dst != owner): its index among the owner's size - 1 channels.
RINGGUARD_HOST_DEVICE inline int p2pChannel(int owner, int dst) { return dst < owner ? dst : dst - 1; }
// Where slot s (0, 1) of a channel's chunk table and data start in the owner's window.
RINGGUARD_HOST_DEVICE inline size_t p2pTableOffset(const WindowLayout& l, int channel, uint32_t slot) {
  return l.p2pOffset + (size_t(channel) * 2 + slot) * l.p2pSlotStride;
}
RINGGUARD_HOST_DEVICE inline size_t p2pDataOffset(const WindowLayout& l, int channel, uint32_t slot) {
  return p2pTableOffset(l, channel, slot) + l.p2pTableBytes;
}

// Error codes a kernel leaves in its rank's error record (and, nonzero, in its window's error word).
enum class PeerError : uint32_t {
  kNone = 0,
  kTimeout = 1,              // a peer did not publish (or acknowledge) before the deadline
  kFingerprintMismatch = 2,  // a peer published a different collective
  kCorrupt = 3,              // a chunk failed its CRC on every re-read
  kPeerFailed = 4,           // a peer's error word is set: it failed first
  kAborted = 5,              // the host asked every spinning kernel to stop
  // All-to-all with splits (core/peer_alltoall_plan.h); peer = the sending rank, chunk = the receiving rank:
  kSplitMismatch = 6,  // the sender's count for the receiver is not the count the receiver expects
  kBlockTable = 7,     // the sender's block for the receiver lies outside its window (or before its table)
  // Send/recv: the two ends of a message give different counts; peer = the other end, chunk = 0 when this
  // rank sends, 1 when it receives, expected = this rank's count, seen = the other end's (low 32 bits).
  kMessageMismatch = 8,
  // A wait on a peer whose process has exited (the host's watchdog saw it: ErrorRecord::exitedPeers); peer =
  // that rank. What the peer stored before it exited still counts: the wait looks once more first.
  kPeerExited = 9,
};

// What a kernel reports to its host (mapped pinned memory; the first error wins, counters accumulate).
struct ErrorRecord {
  uint32_t code;            // PeerError
  int32_t peer;             // the rank the error names (-1: none)
  uint32_t chunk;           // kSplitMismatch, kBlockTable: the receiving rank
  uint32_t expected;        // crc or fingerprint this rank expected (kSplitMismatch: the receiver's count,
                            // kBlockTable: the window's chunks; low 32 bits)
  uint32_t seen;            // what the peer published (or what the bytes hashed to; kSplitMismatch: the
                            // sender's count, kBlockTable: one past the block's last chunk)
  uint32_t abortRequested;  // written by the host: every spin stops with kAborted
  uint32_t
      exitedPeers;  // written by the host (bit r: rank r's process exited): a wait on r ends, kPeerExited
  uint64_t epoch;   // the collective (the window's sequence number)
  unsigned long long detected;  // chunk reads that failed their CRC check (each is re-read)
  unsigned long long injected;  // chunk reads corrupted by fault injection (detected must equal it)
  // kFingerprintMismatch of a collective: this rank's fingerprint words and the peer's (PeerWindowArgs::
  // fingerprint, as each published them in its window header), so that the host names both collectives.
  // fingerprintsKnown is 1 when they were copied.
  uint32_t fingerprintsKnown;
  uint32_t fingerprints[2][kFingerprintWords];
};

}  // namespace peer
}  // namespace ringguard
