#pragma once
// The planning of send/recv over peer windows (docs/design/protocol.md, "Send/recv"): the rounds a message
// is cut into, which warps of the one sendRecv kernel send and which receive, and whether the peer path
// takes a call. HOST_DEVICE, so the kernel (cuda/peer/sendrecv.cu) and the host tests
// (tests/unit/test_peer_p2p_plan.cc, on CI without a GPU) run the same code.
//
// A message travels on the channel of its ordered pair (src, dst), through two slots of `slotBytes`. A
// message larger than a slot is cut into rounds of a slot each; both ends derive the rounds from the count
// (which the rendezvous makes them agree on), and round r of a message is the channel's round number
// m_r = (rounds before it) + 1 + r, which is its chunks' epoch and picks its slot (m_r & 1).
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {

// Rounds of a message of `bytes` through slots of `slotBytes` (> 0): at least one, so a message of nothing
// still has a number (its rendezvous meets its receive, and its round is acknowledged as any).
RINGGUARD_HOST_DEVICE inline uint64_t p2pRounds(uint64_t bytes, uint64_t slotBytes) {
  return bytes == 0 ? 1 : (bytes + slotBytes - 1) / slotBytes;
}

// Round r of a message of `bytes`: its bytes [offset, offset + bytes) and its chunks (whole kChunkBytes, the
// last zero padded). Every round but the last is a whole slot.
struct P2pRound {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t chunks = 0;
};
RINGGUARD_HOST_DEVICE inline P2pRound p2pRound(uint64_t bytes, uint64_t slotBytes, uint64_t r) {
  P2pRound round;
  round.offset = r * slotBytes;
  if (round.offset >= bytes) {
    round.offset = bytes;
    return round;
  }
  const uint64_t left = bytes - round.offset;
  round.bytes = left < slotBytes ? left : slotBytes;
  round.chunks = uint32_t((round.bytes + kChunkBytes - 1) / kChunkBytes);
  return round;
}

// The receiving warps that read round `chunks` (those with a chunk in it; warp 0 alone for an empty round,
// to acknowledge it): each counts itself when done, and the last one acknowledges the round. Chunk c of a
// round is warp c % warps's, so the warps with a chunk are a prefix and a later round's (never more chunks)
// are a prefix of an earlier round's.
RINGGUARD_HOST_DEVICE inline uint32_t p2pReadingWarps(uint32_t warps, uint32_t chunks) {
  const uint32_t n = chunks < warps ? chunks : warps;
  return n == 0 ? 1u : n;
}

// How many of the kernel's `warps` warps send (warps [0, result)); the rest receive. A call with a send and
// a receive splits them in proportion to the chunks of each side's first round, at least one warp each; a
// call with one side gives it every warp. (Each side's warps are its own: the ends of a pair need not split
// alike.)
RINGGUARD_HOST_DEVICE inline uint32_t p2pSendWarps(uint32_t warps, bool sends, bool receives,
                                                   uint64_t sendChunks, uint64_t recvChunks) {
  if (!sends) return 0;
  if (!receives) return warps;
  if (warps < 2) return 1;  // never: a block has 16 warps
  const uint64_t total = sendChunks + recvChunks;
  uint64_t s = total == 0 ? warps / 2 : (uint64_t(warps) * sendChunks + total / 2) / total;
  if (s < 1) s = 1;
  if (s > warps - 1) s = warps - 1;
  return uint32_t(s);
}

// Does the peer path take a sendRecv of rank `rank` (of `size`) to `dst` and from `src` (-1: none)? Only
// with channels (`p2pBytes` > 0, agreed when the windows were made; mapped only for
// RINGGUARD_DEVICE_TRANSPORT=peer), and not a message to this rank itself (a local copy the pipeline makes).
// Any size of message takes the channel (in rounds), so both ends of a message decide alike from what they
// have alike. (A receive from any source never comes here: it stays on
// the host pipeline, PeerLanes::recvAny; so do peers on other hosts, which have no windows.)
inline bool peerPathTakesSendRecv(int size, int rank, int dst, int src, size_t p2pBytes) {
  if (p2pBytes == 0 || size < 2) return false;
  if (dst < 0 && src < 0) return false;
  if (dst == rank || src == rank) return false;
  return dst < size && src < size;
}

}  // namespace peer
}  // namespace ringguard
