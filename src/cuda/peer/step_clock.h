#pragma once
// The per-step clock trace of the peer kernels (cuda/peer/step_clock.cuh): what a kernel built with
// RINGGUARD_PEER_STEP_CLOCKS records and the host reads (bench/gpu/bench_peer_steps.cc). CUDA-free. The
// default build records nothing and never looks at this; it is here so both sides agree on one format.
//
// Every call of an instrumented kernel writes one StepRow into a ring of kStepRingRows rows (row epoch %
// kStepRingRows) whose device address the owner stores at kStepTraceOffset of its own window's header (a
// line the protocol never uses; a zero there records nothing). Block 0's thread 0 records the steps of its
// block (warp 0 handles chunk 0 and every kWarps * blocks-th after it; a step reached more than once keeps
// its last time); the tail steps (kLast*) are the last block's thread 0, the one that publishes `done`.
#include <cstddef>
#include <cstdint>

#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {

// The header line that holds the ring's device address (u64): after every word the protocol uses.
inline constexpr size_t kStepTraceOffset = kHeaderBytes - kLine;
static_assert(kStepTraceOffset >= kOfferedOffset + 2 * kMaxRanks * sizeof(MessageEntry),
              "the step trace's line is one the protocol does not use");

// Steps in the order the one-shot reaches them. Per peer p: kPeerSteps words from kStepPeer + kPeerSteps * p
// (this rank's own: only kStepPeerLoaded, from its input).
enum StepId : int {
  kStepEntry = 0,     // kernel entry
  kStepSeqRead,       // the seq word read (epoch known)
  kStepAcked,         // every peer's done >= epoch - 2 (threads < size wait) and the CRC tables' copy into
                      // shared memory landed, block barrier passed (since 2026-12-05, thirty-fourth session)
  kStepInputLoaded,   // publish: the warp's input vectors of its (last) chunk in registers
  kStepPublishCrc,    // publish: the chunk's CRC computed and its table entry stored
  kStepPublishFence,  // publish: warp barrier and the fence before the epochs
  kStepEpochsStored,  // publish: the warp's chunk epochs stored
  kStepPeer,          // per peer, kPeerSteps each:
  kStepPeerLast = kStepPeer + 3 * kMaxRanks - 1,
  kStepReduced,         // one-shot: the warp's reduced chunks stored; two-shot: its share published
  kStepResultsRead,     // two-shot: the other shares' results read and stored
  kStepArrivalChecked,  // every peer's arrival slot seen (block 0's last warp waits), block barrier passed
  kStepGridFence,       // the fence before the block's arrival count (grids of several blocks)
  kStepArriveCounted,   // the block's atomicAdd on the arrival count returned (grids of several blocks)
  kStepExit,            // block 0 leaves (before writing this row)
  kStepLastArrive,      // the last block: its atomicAdd returned (the grid's barrier)
  kStepLastReported,    // the last block: seq stored, reportToHost done
  kStepLastDone,        // the last block: done's release store issued
  kStepLastExit,        // the last block leaves (before writing this row)
  kStepCount
};
inline constexpr int kPeerSteps = 3;
inline constexpr int kStepPeerEpochSeen = 0;  // the chunk's epoch seen (the acquire load that saw it)
inline constexpr int kStepPeerLoaded = 1;     // the chunk's bytes (and entry) in registers
inline constexpr int kStepPeerVerified = 2;   // its CRC recomputed and equal
inline constexpr int kStepFirstTail = kStepLastArrive;

inline constexpr int kStepRingRows = 4096;

// One call: clock64 (the SM's cycle counter: fine-grained, comparable within one block only) and
// %globaltimer (ns, comparable across SMs and processes of one GPU, coarser) at every step; a step not
// reached holds 0.
struct StepRow {
  uint64_t epoch;      // 0: no call wrote this row
  uint32_t smid[2];    // block 0's SM, the last block's SM
  uint32_t lastBlock;  // the last block's index
  uint32_t blocks;     // the grid
  uint64_t clock[kStepCount];
  uint64_t timer[kStepCount];
};

}  // namespace peer
}  // namespace ringguard
