// The verified send/recv over peer windows (docs/design/protocol.md, "Send/recv"): a message travels on the
// channel of its ordered pair (src, dst), through two slots in the sender's window, in rounds of a slot each
// (core/peer_p2p_plan.h). One kernel per call: its first warps send (the offer, then each round's chunks once
// the receiver acknowledged the slot's previous use, then the rendezvous with the receive), the rest receive
// (the posting, the rendezvous with the send, then each round's chunks, verified, and the slot's
// acknowledgement). Nothing here touches the collectives' words (epoch, done, arrival slots), so a send/recv
// between two collectives neither waits for nor delays the ranks that take no part in it.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/peer_p2p_plan.h"
#include "cuda/cuda_check.h"
#include "cuda/peer/kernel_preload.h"
#include "cuda/peer/peer_device.cuh"
#include "cuda/peer/peer_launch.h"
#include "ringguard/core/crc32.h"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernels' bounds from this file.
constexpr int kBlockThreads = 512;
static_assert(kBlockThreads == kThreads, "the block size of peer_device.cuh");

__device__ __forceinline__ uint32_t saturated32(uint64_t v) {
  return v > 0xffffffffull ? 0xffffffffu : uint32_t(v);
}

// This end's rendezvous entry for message `number` with `peer` (`entries`: kOfferedOffset of the sender,
// kPostedOffset of the receiver), which the other end checks: count and fingerprint, then the number with
// release order. Thread-level.
__device__ __forceinline__ void postEntry(const PeerSendRecvArgs& a, size_t entries, int peer,
                                          uint64_t number, uint64_t count, uint32_t fpCrc) {
  MessageEntry* e = at<MessageEntry>(a.windows[a.rank], messageEntryOffset(entries, peer, number));
  e->count = count;
  e->fingerprint = fpCrc;
  storeRelease(&e->number, number, a.oneDevice);
}

// Either end's start: the number an error names until a round is under way (the message's first round).
// Returns the message's bytes and rounds.
struct MessageSize {
  uint64_t bytes;
  uint64_t rounds;
};
__device__ __forceinline__ MessageSize startMessage(Collective& k, uint64_t count, size_t esize,
                                                    uint64_t roundsBefore) {
  k.epoch = roundsBefore + 1;
  const uint64_t bytes = count * esize;
  return MessageSize{bytes, p2pRounds(bytes, k.a->layout.p2pBytes)};
}

// The other end's entry for message `number`, once it is there, against this end's count and fingerprint.
// The entry cannot be overwritten (by message number + 2) before this end has checked it: the other end
// writes that one only after its call for message number + 1, which waits for this end's entry of it, which
// this end writes only after this call. So equality is the test. `sending`: this rank is the sender (the
// error's chunk field says which end it is). Lane-level; false once the error is recorded.
__device__ __forceinline__ bool meet(const Collective& k, const MessageEntry* theirs, int peer,
                                     uint64_t number, uint64_t count, bool sending) {
  if (!k.waitFor(
          &theirs->number, peer, ~0u, [&](uint64_t v) { return v == number; }, false))
    return false;
  const uint64_t c = loadVolatile(&theirs->count);
  const uint32_t f = loadVolatile(&theirs->fingerprint);
  // A fence before the error word: a peer that sees it also sees this end's entry (waitFor's last look).
  if (c != count || f != k.fpCrc) fence(k.a->oneDevice);
  if (c != count) {
    k.fail(PeerError::kMessageMismatch, peer, sending ? 0u : 1u, saturated32(count), saturated32(c));
    return false;
  }
  if (f != k.fpCrc) {
    k.fail(PeerError::kFingerprintMismatch, peer, ~0u, k.fpCrc, f);
    return false;
  }
  return true;
}

// The sending warps (k.warp of k.warps): message `message` to a.dst, its rounds numbered from roundsBefore
// + 1.
__device__ __forceinline__ void sendMessage(Collective& k, const PeerSendRecvArgs& a, uint64_t message,
                                            uint64_t roundsBefore, size_t esize) {
  const int dst = a.dst;
  const uint64_t slotBytes = a.layout.p2pBytes;
  const MessageSize size = startMessage(k, a.sendCount, esize, roundsBefore);
  const uint64_t bytes = size.bytes, rounds = size.rounds;
  void* mine = k.mine();
  const MessageEntry* posted =
      at<MessageEntry>(a.windows[dst], messageEntryOffset(kPostedOffset, a.rank, message));
  const uint64_t* ack = at<uint64_t>(a.windows[dst], kAckOffset) + a.rank;
  const int channel = p2pChannel(a.rank, dst);
  const char* in = static_cast<const char*>(a.send);
  bool met = false;  // lane 0's: the rendezvous is done
  for (uint64_t r = 0; k.ok && r < rounds; ++r) {
    const P2pRound round = p2pRound(bytes, slotBytes, r);
    if (k.warp >= round.chunks) break;  // no chunk of this warp's in this round, nor in a later one
    k.epoch = roundsBefore + 1 + r;
    const uint32_t slot = uint32_t(k.epoch & 1u);
    uint32_t ok = 1;
    if (k.lane == 0) {
      // From the third round on the slot waits for this message's own rounds to be read: the receive must be
      // posted (and agree) first, so ends that disagree fail on the mismatch, not on an acknowledgement.
      if (r >= 2 && !met) {
        ok = meet(k, posted, dst, message, a.sendCount, true) ? 1u : 0u;
        met = true;
      }
      if (ok && k.epoch > 2)
        ok = k.waitFor(
                 ack, dst, ~0u, [&](uint64_t v) { return v + 2 >= k.epoch; }, false)
                 ? 1u
                 : 0u;
    }
    k.ok = __shfl_sync(0xffffffffu, ok, 0) != 0;
    __syncwarp();  // lane 0's acquire of the acknowledgement before every lane's stores into the slot
    const char* base = in + round.offset;
    const bool aligned = aligned16(base);
    publishChunksTo(
        k, at<ChunkEntry>(mine, p2pTableOffset(a.layout, channel, slot)),
        at<char>(mine, p2pDataOffset(a.layout, channel, slot)), 0, round.chunks,
        [](uint32_t) { return true; },
        [&](uint32_t c, uint4(&vec)[kLaneVectors]) { loadInputChunk(base, c, round.bytes, aligned, vec); });
  }
  // The rendezvous: the send ends once its receive is posted and agrees (the rounds are in the slots, so the
  // input is free: the kernel need not wait for the last read).
  if (k.ok && k.warp == 0 && k.lane == 0 && !met) meet(k, posted, dst, message, a.sendCount, true);
}

// The receiving warps: message `message` from a.src, its rounds numbered from roundsBefore + 1.
__device__ __forceinline__ void receiveMessage(Collective& k, const PeerSendRecvArgs& a, uint64_t message,
                                               uint64_t roundsBefore, size_t esize) {
  const int src = a.src;
  const uint64_t slotBytes = a.layout.p2pBytes;
  const MessageSize size = startMessage(k, a.recvCount, esize, roundsBefore);
  const uint64_t bytes = size.bytes, rounds = size.rounds;
  void* mine = k.mine();
  // Only the first round's readers take part (a later round's are among them). Each meets the offer before
  // it reads a chunk, so ends that disagree fail on the mismatch on both sides, before any byte is read.
  if (k.warp >= p2pReadingWarps(k.warps, p2pRound(bytes, slotBytes, 0).chunks)) return;
  void* theirs = a.windows[src];
  uint32_t ok = 1;
  if (k.ok && k.lane == 0) {
    const MessageEntry* offered =
        at<MessageEntry>(theirs, messageEntryOffset(kOfferedOffset, a.rank, message));
    ok = meet(k, offered, src, message, a.recvCount, false) ? 1u : 0u;
  }
  k.ok = k.ok && __shfl_sync(0xffffffffu, ok, 0) != 0;
  const int channel = p2pChannel(src, a.rank);
  uint64_t* ack = at<uint64_t>(mine, kAckOffset) + src;
  uint32_t* finished = at<uint32_t>(mine, kP2pStateOffset + 8);
  char* out = static_cast<char*>(a.recv);
  for (uint64_t r = 0; k.ok && r < rounds; ++r) {
    const P2pRound round = p2pRound(bytes, slotBytes, r);
    const uint32_t readers = p2pReadingWarps(k.warps, round.chunks);
    if (k.warp >= readers) break;
    k.epoch = roundsBefore + 1 + r;
    const uint32_t slot = uint32_t(k.epoch & 1u);
    ChunkEntry* table = at<ChunkEntry>(theirs, p2pTableOffset(a.layout, channel, slot));
    const char* data = at<char>(theirs, p2pDataOffset(a.layout, channel, slot));
    char* to = out + round.offset;
    const bool aligned = aligned16(to);
    for (uint32_t c = k.warp; c < round.chunks; c += k.warps) {
      uint4 vec[kLaneVectors];
      if (!readChunkAt(k, src, table, data, c, vec)) {
        k.ok = false;
        break;
      }
      storeOutputChunk(to, c, 0, round.bytes, aligned, vec);
    }
    if (!k.ok) break;
    // The slot's acknowledgement: the last of the round's readers stores it, in round order (a later round's
    // readers are a subset of an earlier round's, so its last reader may finish while a reader of the earlier
    // round still reads: it waits for that acknowledgement first, else the sender would overwrite a slot
    // still being read).
    __syncwarp();
    ok = 1;
    if (k.lane == 0) {
      fence(a.oneDevice);  // this warp's reads of the slot happen before it counts itself
      if (atomicAdd(&finished[slot], 1u) == readers - 1) {
        finished[slot] = 0;
        ok = k.waitFor(
                 ack, a.rank, ~0u, [&](uint64_t v) { return v + 1 >= k.epoch; }, false)
                 ? 1u
                 : 0u;
        if (ok) {
          fence(a.oneDevice);
          storeRelease(ack, k.epoch, a.oneDevice);
        }
      }
    }
    k.ok = __shfl_sync(0xffffffffu, ok, 0) != 0;
  }
}

__global__ void __launch_bounds__(kBlockThreads, 1)
    sendRecvKernel(const __grid_constant__ PeerSendRecvArgs a, uint32_t sendFp, uint32_t recvFp,
                   uint32_t sendWarps, size_t esize) {
  // The channels' numbers before this call: messages and rounds sent to dst, received from src
  // (kP2pCountersOffset: word i * kMaxRanks + peer), kept on the device so a replayed graph gets fresh ones.
  __shared__ uint64_t before[4];
  stageCrcTables();
  void* mine = a.windows[a.rank];
  uint64_t* counters = at<uint64_t>(mine, kP2pCountersOffset);
  if (threadIdx.x == 0) blockDeadline() = globalTimer() + a.timeoutNs;
  if (threadIdx.x < 4) {
    const int peer = threadIdx.x < 2 ? a.dst : a.src;
    before[threadIdx.x] = peer >= 0 ? counters[threadIdx.x * kMaxRanks + unsigned(peer)] : 0;
  }
  __syncthreads();
  Collective k;
  k.a = &a;
  k.epoch = 0;
  k.lane = threadIdx.x & 31u;
  k.detected = 0;
  k.injected = 0;
  k.onePeer = true;
  // A rank that failed stays failed (its error word poisons every later call): nothing is posted or offered.
  // Otherwise thread 0 of every block posts this call's rendezvous entries (the same values from each block)
  // before any warp of the block reads or fails: a warp that fails on a mismatch then has the entries behind
  // it, so the other end, finding this rank's error word, still finds this end's entry (waitFor's last look)
  // and names the mismatch itself, whichever warp failed first. k.ok is read once per block, so it is alike
  // in every warp of it.
  __shared__ uint32_t okShared;
  if (threadIdx.x == 0) {
    okShared = loadVolatile(k.errorWord(a.rank)) == 0 ? 1u : 0u;
    if (okShared != 0 && a.dst >= 0) postEntry(a, kOfferedOffset, a.dst, before[0] + 1, a.sendCount, sendFp);
    if (okShared != 0 && a.src >= 0) postEntry(a, kPostedOffset, a.src, before[2] + 1, a.recvCount, recvFp);
  }
  crcTablesArrived();
  __syncthreads();
  k.ok = okShared != 0;
  const uint32_t warp = blockIdx.x * kWarps + threadIdx.x / 32, warps = gridDim.x * kWarps;
  if (warp < sendWarps) {
    k.warp = warp;
    k.warps = sendWarps;
    k.fpCrc = sendFp;
    sendMessage(k, a, before[0] + 1, before[1], esize);
  } else {
    k.warp = warp - sendWarps;
    k.warps = warps - sendWarps;
    k.fpCrc = recvFp;
    receiveMessage(k, a, before[2] + 1, before[3], esize);
  }
  addFaultCounts(k);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t counted = 0;
    if (lastBlockOfGrid(at<uint32_t>(mine, kP2pStateOffset), 1u, counted)) {
      const uint64_t slotBytes = a.layout.p2pBytes;
      if (a.dst >= 0) {
        counters[kP2pMessagesSent + a.dst] = before[0] + 1;
        counters[kP2pRoundsSent + a.dst] = before[1] + p2pRounds(uint64_t(a.sendCount) * esize, slotBytes);
      }
      if (a.src >= 0) {
        counters[kP2pMessagesReceived + a.src] = before[2] + 1;
        counters[kP2pRoundsReceived + a.src] =
            before[3] + p2pRounds(uint64_t(a.recvCount) * esize, slotBytes);
      }
      reportToHost(a, mine);
    }
  }
}

// The CRC of a message's fingerprint: the path's words (kind, lane) with the direction's dtype, its count in
// elements and both ends, the shape kSendRecv folded in as every collective's is. Both ends of a message
// compute the same; the kernel compares bytes (the rendezvous entries' counts), so a dtype of the same size
// that differs fails here, on both ends.
uint32_t messageFingerprintCrc(const PeerWindowArgs& a, DataType dtype, size_t count, int src, int dst) {
  uint32_t words[kFingerprintWords + 1];
  std::copy(std::begin(a.fingerprint), std::end(a.fingerprint), words);
  words[1] = uint32_t(dtype);
  words[3] = uint32_t(count);
  words[4] = uint32_t(uint64_t(count) >> 32);
  words[5] = uint32_t(src) | uint32_t(dst) << 16;
  words[kFingerprintWords] = 0x50000000u | uint32_t(PeerAlgorithm::kSendRecv);
  return crc32(words, sizeof words);
}

}  // namespace

Status launchPeerSendRecv(const PeerSendRecvArgs& args, void* stream) {
  const std::string name = "peer send/recv: ";
  const auto invalid = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, name + why);
  };
  const bool sends = args.dst >= 0, receives = args.src >= 0;
  const size_t sendEsize = dataTypeSize(args.sendDtype), recvEsize = dataTypeSize(args.recvDtype);
  if ((sends && sendEsize == 0) || (receives && recvEsize == 0)) return invalid("dtype has no element size");
  RINGGUARD_RETURN_IF_ERROR(checkWindowArgs(args, "send/recv", 0));
  if (args.layout.p2pBytes == 0 || args.layout.p2pChannels != args.size - 1) {
    return invalid("the windows have no send/recv channels for " + std::to_string(args.size) +
                   " ranks (made with RINGGUARD_PEER_P2P_BYTES=0, or for another number of ranks)");
  }
  if (!sends && !receives) return invalid("neither a destination nor a source rank");
  const auto checkEnd = [&](const char* what, int p, const char* buffer, const void* data, size_t count,
                            size_t esize) -> Status {
    const std::string end = std::string(what) + " rank " + std::to_string(p);
    if (p >= args.size) return invalid(end + " of size " + std::to_string(args.size) + " is out of range");
    if (p == args.rank) return invalid(end + " is this rank: a message to itself has no channel");
    if (count > ~size_t(0) / esize) {
      return invalid(std::string(buffer) + " count " + std::to_string(count) +
                     " overflows the address space");
    }
    if (count != 0 && data == nullptr) return invalid(std::string("null ") + buffer + " buffer");
    return Status::ok();
  };
  if (sends) {
    RINGGUARD_RETURN_IF_ERROR(
        checkEnd("destination", args.dst, "send", args.send, args.sendCount, sendEsize));
  }
  if (receives) {
    RINGGUARD_RETURN_IF_ERROR(checkEnd("source", args.src, "recv", args.recv, args.recvCount, recvEsize));
  }
  const size_t sendBytes = sends ? args.sendCount * sendEsize : 0,
               recvBytes = receives ? args.recvCount * recvEsize : 0;
  const uintptr_t s = reinterpret_cast<uintptr_t>(args.send), r = reinterpret_cast<uintptr_t>(args.recv);
  if (sendBytes != 0 && recvBytes != 0 && s < r + recvBytes && r < s + sendBytes) {
    return invalid("send (" + std::to_string(sendBytes) + " bytes) and recv (" + std::to_string(recvBytes) +
                   " bytes) overlap");
  }
  // Warps for the first round of each side (the largest), split between them in proportion.
  const uint64_t slotBytes = args.layout.p2pBytes;
  const uint32_t sendChunks = sends ? p2pRound(sendBytes, slotBytes, 0).chunks : 0;
  const uint32_t recvChunks = receives ? p2pRound(recvBytes, slotBytes, 0).chunks : 0;
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(size_t(sendChunks) + recvChunks, args.size, &blocks));
  // Both sides need a warp at least: the grid's 16 warps a block are always enough.
  const uint32_t warps = uint32_t(blocks) * kWarps;
  const uint32_t sendWarps = p2pSendWarps(warps, sends, receives, sendChunks, recvChunks);
  // The kernel moves bytes: its counts (which the rendezvous compares) are each direction's bytes, its
  // element size 1; the dtypes and element counts travel in the two CRCs.
  PeerSendRecvArgs bytes = args;
  bytes.sendCount = sendBytes;
  bytes.recvCount = recvBytes;
  sendRecvKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      bytes, sends ? messageFingerprintCrc(args, args.sendDtype, args.sendCount, args.rank, args.dst) : 0u,
      receives ? messageFingerprintCrc(args, args.recvDtype, args.recvCount, args.src, args.rank) : 0u,
      sendWarps, size_t(1));
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status preloadPeerSendRecv() { return preloadKernel(sendRecvKernel); }

}  // namespace peer
}  // namespace ringguard
