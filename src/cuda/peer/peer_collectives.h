#pragma once
// Host launchers of the verified one-sided collectives over peer windows (docs/design/protocol.md, "The
// one-sided protocol"). CUDA-free: callers need no CUDA header.
//
// Each collective is one kernel on the caller's stream: every rank publishes what its peers need into its
// own window (chunks with CRC, fingerprint and epoch), reads what it needs from its peers' windows, verifies
// each chunk's CRC in registers (re-reading on a mismatch) and reduces in rank order 0..N-1 or copies, so
// every rank gets the same bits. The epoch is kept on the device, so a launch can be captured in a CUDA graph
// and replayed. Errors (a deadline passed, a fingerprint mismatch, a chunk corrupt on every re-read, a failed
// peer, an abort) land in the rank's ErrorRecord (mapped pinned memory) and in its window's error word; no
// trap, no hang. Every rank of the windows must make the same call (same kind, dtype, op, count, root, lane).
#include <cstddef>
#include <cstdint>

#include "core/call_clock.h"
#include "core/peer_fault.h"
#include "core/peer_plan.h"
#include "core/peer_window_layout.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace peer {

// What every collective of the protocol takes: the windows, the error record and the checks' settings.
struct PeerWindowArgs {
  int rank = 0;
  int size = 0;
  void* windows[kMaxRanks] = {};  // every rank's window as this process maps it
  WindowLayout layout;
  ErrorRecord* record = nullptr;  // device pointer of this rank's record
  // Every window is on this rank's GPU (PeerWindows::oneDevice): flags, fences and acknowledgements then
  // order at GPU scope, which every process on the device shares; otherwise at system scope.
  bool oneDevice = false;
  uint32_t fingerprint[kFingerprintWords] = {};  // kind, dtype, op, count (low, high), root, lane, factor
  uint64_t timeoutNs = 0;
  int maxRereads = 3;
  // A wide collective's grid waits for its peers behind a one-block arrival kernel (arrival.cu): set where
  // the call moves more than RINGGUARD_PEER_ARRIVAL_BYTES (PeerPath). Ranks may differ: either way every
  // rank's grid finds every peer's arrival. The send/recv and decline launchers ignore it.
  bool arriveFirst = false;
  // Fault injection (core/peer_fault.h): a read of chunk c from peer p at epoch e is damaged in registers
  // when hash(seed, e, c, p) < probability * 2^32, as the mode says; every rank injects on its own reads.
  PeerFault fault;
};

struct PeerAllreduceArgs : PeerWindowArgs {
  const void* send = nullptr;
  void* recv = nullptr;  // may be send
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // kAllreduceOneShot: every rank reads every chunk of every rank. kAllreduceTwoShot: every rank reduces its
  // share (core/peer_plan.h), publishes the result, and reads the other shares' results. The same bits.
  PeerAlgorithm algorithm = PeerAlgorithm::kAllreduceOneShot;
};

// recv holds size * count elements: rank p's send at recv + p * count.
struct PeerAllgatherArgs : PeerWindowArgs {
  const void* send = nullptr;  // may be recv + rank * count
  void* recv = nullptr;
  size_t count = 0;  // elements per rank
  DataType dtype = DataType::kFloat32;
};

struct PeerBroadcastArgs : PeerWindowArgs {
  const void* send = nullptr;  // read on the root only
  void* recv = nullptr;        // every rank's result (the root's too: a copy of send unless they are one)
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};

// send holds size * count elements; recv gets the reduction of every rank's elements [rank * count,
// (rank + 1) * count), in rank order.
struct PeerReduceScatterArgs : PeerWindowArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements per rank's result
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

// Block p of `send` (sendCounts[p] elements at sendDispls[p]) goes to rank p; rank p's block for this rank
// lands at recvDispls[p] (recvCounts[p] elements): MPI_Alltoallv, as Communicator::alltoallAsync. Not in
// place (send and recv share no byte). `splits` false is the equal form: every count one value, which every
// rank folds into the fingerprint; true is the split form: each rank publishes a block table that every
// reader checks against every rank's counts (core/peer_alltoall_plan.h), so ranks whose splits disagree all
// fail naming the pair (kSplitMismatch). Every rank must call the same form. In the split form a rank's
// blocks must fit its window (every rank fails naming it otherwise: kBlockTable).
struct PeerAlltoallArgs : PeerWindowArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t sendCounts[kMaxRanks] = {};
  size_t sendDispls[kMaxRanks] = {};
  size_t recvCounts[kMaxRanks] = {};
  size_t recvDispls[kMaxRanks] = {};
  DataType dtype = DataType::kFloat32;
  bool splits = false;
};

// One message each way on the channels of ordered pairs (docs/design/protocol.md, "Send/recv"): `sendCount`
// elements of `send` to rank `dst` and `recvCount` elements from rank `src` into `recv` (-1: no send, no
// receive; never this rank itself), in one kernel whose first warps send and the rest receive, so two ranks
// exchanging with each other both progress. Messages of one ordered pair match in call order, numbered on the
// device (a replayed graph numbers them afresh); both ends must give the same count, dtype and lane (both
// fail naming the other and both counts, kMessageMismatch, or the fingerprints, kFingerprintMismatch). A
// send ends once its rounds are published and its receive is posted (NCCL's send does not complete before
// its receive is posted either). Needs windows made with send/recv slots (layout.p2pBytes > 0). send and
// recv share no byte.
struct PeerSendRecvArgs : PeerWindowArgs {
  const void* send = nullptr;
  size_t sendCount = 0;
  int dst = -1;
  void* recv = nullptr;
  size_t recvCount = 0;
  int src = -1;
  // Each direction's dtype (a grouped call's round may send one and receive another: sendRecvGroupAsync).
  // Counts are in elements of their own direction's dtype; the launcher hands the kernel bytes (element
  // size 1) and folds each direction's dtype and count into that direction's fingerprint CRC, so ends that
  // disagree on either still fail on both sides.
  DataType sendDtype = DataType::kFloat32;
  DataType recvDtype = DataType::kFloat32;
};

// Each checks its arguments (kInvalidArgument naming the collective and the one at fault) and enqueues the
// kernel on `stream` (a cudaStream_t). What the kernel finds is read later from the ErrorRecord.
Status launchPeerAllreduce(const PeerAllreduceArgs& args, void* stream);
Status launchPeerAllgather(const PeerAllgatherArgs& args, void* stream);
Status launchPeerBroadcast(const PeerBroadcastArgs& args, void* stream);
Status launchPeerReduceScatter(const PeerReduceScatterArgs& args, void* stream);
Status launchPeerAlltoall(const PeerAlltoallArgs& args, void* stream);
Status launchPeerSendRecv(const PeerSendRecvArgs& args, void* stream);
// A call this rank's own checks rejected, in the collectives' order (decline.cu): the args' fingerprint is
// the call's kind marked invalid-arguments; the other ranks' kernels fail at once naming this rank.
Status launchPeerDecline(const PeerWindowArgs& args, void* stream);
// This rank's error word in its own window (`ownWindow`, device memory) set to kAborted, on `stream`: what an
// abort leaves for the kernels that start after it (abort_mark.cu).
Status launchPeerAbortMark(void* ownWindow, void* stream);

// The timeline's clocks of a call (call_clock.cu; core/call_clock.h), while the timeline is on: one-thread
// kernels on the call's stream around its own, so the collectives' kernels are the same with the timeline
// off. launchCallClockBegin stores %globaltimer in this rank's window (`ownWindow`, word kCallStartWord of
// its counters line); launchCallClockEnd, after the call's kernels, writes the call's ring entry (`ring`:
// device address of the mapped ring) with that start, its own end, the epoch the call left in the window's
// seq word and the call's fingerprint words (kind, dtype, count). Captured in a graph, each replay is timed.
Status launchCallClockBegin(void* ownWindow, void* stream);
Status launchCallClockEnd(void* ownWindow, CallClock* ring, const PeerWindowArgs& call, void* stream);
// The offset that turns the kernels' %globaltimer into the host's steady clock (host = gpu + offset), for
// the spans: measured on the current device, synchronously.
Status measureClockOffset(int64_t* offsetNs);

// Loads every kernel the launchers above may launch, on the current device (kernel_preload.h says why: a
// kernel loaded at its first launch may wait on the host for the spinning kernels already running). The
// path calls it once when it is made.
Status preloadPeerKernels();

// The CRC-32 the kernels publish for `bytes` (a multiple of kChunkBytes) bytes at device address `data`, one
// per chunk, computed by the kernels' own warp code: what the tests compare with the host CRC (core/crc32.h).
Status peerChunkCrcForTest(const void* data, size_t bytes, uint32_t* crcOut);

}  // namespace peer
}  // namespace ringguard
