#pragma once
// The per-step clock trace of the peer kernels (format: cuda/peer/step_clock.h), compiled in only when
// RINGGUARD_PEER_STEP_CLOCKS is defined (bench_peer_steps builds the allreduce kernels so); otherwise every
// hook below expands to nothing and the kernels are the product's, instruction for instruction.
//
// What a hook does, and nothing more: block 0's thread 0 (the tail hooks: the last block's) reads clock64 and
// %globaltimer and stores them to a __shared__ array only that thread reads. No fence, no atomic, no global
// access until the row is written after the kernel's last protocol step. The hooks are compiler barriers
// ("memory" clobber: the instructions around them stay on their side) and a hook AFTER(v) first waits for v
// (a predicated shared store that needs it), so a load's step is taken when its data arrived, not when it
// was issued; the product's next instruction would wait for the same data, just later or vector by vector.
#include "cuda/peer/step_clock.h"

#ifdef RINGGUARD_PEER_STEP_CLOCKS

#include <cuda_runtime.h>

#include <cstdint>

namespace ringguard {
namespace peer {
namespace {

struct StepShared {
  uint64_t clock[kStepCount];
  uint64_t timer[kStepCount];
  uint32_t sink;  // AFTER's predicated store: never read
};

__device__ __forceinline__ StepShared& stepShared() {
  __shared__ StepShared s;
  return s;
}

__device__ __forceinline__ void stepRecord(int step) {
  uint64_t c, t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  StepShared& s = stepShared();
  s.clock[step] = c;
  s.timer[step] = t;
}
__device__ __forceinline__ bool stepRecorder() { return blockIdx.x == 0 && threadIdx.x == 0; }

// Waits until v is in a register: a store that needs it (predicated on a value no data has in practice,
// and harmless when it has) is issued in order before the clock reads.
__device__ __forceinline__ void stepWaitFor(uint32_t v) {
  if (v == 0x9e3779b9u) *reinterpret_cast<volatile uint32_t*>(&stepShared().sink) = v;
}
__device__ __forceinline__ uint32_t stepFold(uint32_t v) { return v; }
template <int N>
__device__ __forceinline__ uint32_t stepFold(const uint4 (&vec)[N]) {
  uint32_t x = 0;
#pragma unroll
  for (int v = 0; v < N; ++v) x ^= vec[v].x ^ vec[v].y ^ vec[v].z ^ vec[v].w;
  return x;
}

// Kernel entry (every thread of every block): thread 0 of block 0 takes the entry step; the other threads
// of each block clear the rest of its array (a step not reached reads 0), ordered before every later hook
// by beginCollective's block barrier. Thread 0 takes kStepSeqRead itself, before that barrier.
__device__ __forceinline__ void stepEntry() {
  StepShared& s = stepShared();
  if (threadIdx.x == 0) {
    if (blockIdx.x == 0) stepRecord(kStepEntry);
    return;
  }
  for (unsigned i = threadIdx.x; i < unsigned(kStepCount); i += blockDim.x) {
    if (i == kStepEntry || i == kStepSeqRead) continue;
    s.clock[i] = 0;
    s.timer[i] = 0;
  }
}

// Writes the block's row (block 0: its steps; the last block: the tail) into the ring the owner's window
// names; thread 0, after the kernel's last protocol step.
__device__ __forceinline__ void stepFlush(void* mine, uint64_t epoch, bool last) {
  if (threadIdx.x != 0 || (blockIdx.x != 0 && !last)) return;
  if (blockIdx.x == 0) stepRecord(kStepExit);
  if (last) stepRecord(kStepLastExit);
  StepRow* ring = *reinterpret_cast<StepRow* const*>(static_cast<const char*>(mine) + kStepTraceOffset);
  if (ring == nullptr) return;
  StepRow& row = ring[epoch % kStepRingRows];
  const StepShared& s = stepShared();
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const int from = blockIdx.x == 0 ? 0 : kStepFirstTail;
  const int to = last ? kStepCount : kStepFirstTail;
  for (int i = from; i < to; ++i) {
    row.clock[i] = s.clock[i];
    row.timer[i] = s.timer[i];
  }
  if (blockIdx.x == 0) row.smid[0] = sm;
  if (last) {
    row.smid[1] = sm;
    row.lastBlock = blockIdx.x;
  }
  row.blocks = gridDim.x;
  row.epoch = epoch;
}

}  // namespace
}  // namespace peer
}  // namespace ringguard

// Block 0's thread 0 (every thread may pass through).
#define RINGGUARD_STEP(step)                                                    \
  do {                                                                          \
    if (::ringguard::peer::stepRecorder()) ::ringguard::peer::stepRecord(step); \
  } while (0)
// The same, once `value` (a u32 or the lane's vectors) is in registers.
#define RINGGUARD_STEP_AFTER(step, value)                                 \
  do {                                                                    \
    if (::ringguard::peer::stepRecorder()) {                              \
      ::ringguard::peer::stepWaitFor(::ringguard::peer::stepFold(value)); \
      ::ringguard::peer::stepRecord(step);                                \
    }                                                                     \
  } while (0)
// A tail step: called only by the last block's thread 0.
#define RINGGUARD_STEP_TAIL(step) ::ringguard::peer::stepRecord(step)
#define RINGGUARD_STEP_ENTRY() ::ringguard::peer::stepEntry()
#define RINGGUARD_STEP_FLUSH(mine, epoch, last) ::ringguard::peer::stepFlush(mine, epoch, last)

#else

#define RINGGUARD_STEP(step) ((void)0)
#define RINGGUARD_STEP_AFTER(step, value) ((void)0)
#define RINGGUARD_STEP_TAIL(step) ((void)0)
#define RINGGUARD_STEP_ENTRY() ((void)0)
#define RINGGUARD_STEP_FLUSH(mine, epoch, last) ((void)0)

#endif
