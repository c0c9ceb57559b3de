#pragma once
// Host launcher of the one-shot verified allreduce over peer windows (docs/design/protocol.md, "The
// one-sided protocol"). CUDA-free: callers need no CUDA header.
//
// One kernel on the caller's stream does the whole collective: every rank publishes its input into its own
// window (chunks with CRC, fingerprint and epoch), reads every peer's chunks, verifies each CRC in registers
// (re-reading on a mismatch), and reduces in rank order 0..N-1, so every rank gets the same bits. The epoch
// is kept on the device, so the launch can be captured in a CUDA graph and replayed. Errors (a deadline
// passed, a fingerprint mismatch, a chunk corrupt on every re-read, a failed peer, an abort) land in the
// rank's ErrorRecord (mapped pinned memory) and in its window's error word; no trap, no hang.
#include <cstddef>
#include <cstdint>

#include "core/peer_window_layout.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace peer {

struct PeerAllreduceArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int rank = 0;
  int size = 0;
  void* windows[kMaxRanks] = {};  // every rank's window as this process maps it
  WindowLayout layout;
  ErrorRecord* record = nullptr;                 // device pointer of this rank's record
  uint32_t fingerprint[kFingerprintWords] = {};  // kind, dtype, op, count (low, high), root, lane, 0
  uint64_t timeoutNs = 0;
  int maxRereads = 3;
  // Fault injection: a read of chunk c from peer p at epoch e is corrupted in registers (transit) when
  // hash(seed, e, c, p) < faultProb * 2^32; the re-read is clean. Every rank may inject on its own reads.
  double faultProb = 0;
  uint32_t faultSeed = 0;
};

// Checks the arguments (kInvalidArgument naming the one at fault) and enqueues the kernel on `stream`
// (a cudaStream_t). What the kernel finds is read later from the ErrorRecord.
Status launchPeerAllreduce(const PeerAllreduceArgs& args, void* stream);

// The CRC-32 the kernel publishes for `bytes` (a multiple of 16) bytes at device address `data`, computed
// by the kernel's own warp code: what the tests compare with the host CRC (core/crc32.h).
Status peerChunkCrcForTest(const void* data, size_t bytes, uint32_t* crcOut);

}  // namespace peer
}  // namespace ringguard
