#pragma once
// The replica check's gate kernel (replica_gate.cu; docs/REPLICAS.md, "The gate"): what the device layer's
// ReplicaGate (src/replicas/device/replica_gate.cc) queues on the training stream after a check's all-gather.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ringguard/core/status.h"

namespace ringguard {

// What the gate of one check reads and writes. `words`: the gathered messages in device memory, `ranks`
// blocks of `wordsPerRank` words, valid in `stream`'s order. `copy` and `copied`: page-locked host memory
// as the device addresses it (the verdict thread's slot: the words, then the epoch once they are all
// there). `release` and `expired`: host words mapped into the device (cudaHostAllocMapped), written by the
// host and the kernel respectively.
struct ReplicaGateArgs {
  const uint32_t* words = nullptr;
  size_t wordsPerRank = 0;
  int ranks = 0;
  uint64_t epoch = 0;                 // the check's number, from 1
  uint32_t* copy = nullptr;           // ranks x wordsPerRank words for the host
  uint64_t* copied = nullptr;         // the kernel stores epoch here once `copy` is complete
  const uint64_t* release = nullptr;  // the gate passes once *release >= epoch
  uint64_t* expired = nullptr;        // the kernel stores epoch here when its deadline passed first
  uint64_t timeoutNs = 0;             // the deadline, from the kernel's start (%globaltimer)
};

// One block on `stream`: the words copied for the host (then *copied = epoch, after a system fence); every
// rank's words equal the first rank's (the clean case), it ends at once; otherwise its first thread waits
// until *release >= epoch or the deadline passes (then *expired = epoch, and it ends). Everything queued on
// `stream` after it runs only once it ended.
Status launchReplicaGate(const ReplicaGateArgs& args, cudaStream_t stream);

}  // namespace ringguard
