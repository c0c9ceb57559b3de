#pragma once
// The first differing element of a tensor the replica comparison named (docs/REPLICAS.md): rounds of
// chunk CRCs over that tensor only, all-gathered over the replica group, narrowing to the first chunk the
// ranks disagree on. The answer is a function of the gathered words, so every rank returns the same index.
#include <cstddef>
#include <cstdint>

#include "ringguard/core/status.h"
#include "ringguard/replicas/fingerprint.h"
#include "ringguard/replicas/replica_check.h"

namespace ringguard {

// Chunks per round: a round costs `kLocateChunks` CRCs and an all-gather of that many words per rank, and
// narrows the range by that factor (a 1 GiB float tensor takes 5 rounds).
constexpr size_t kLocateChunks = 64;

// *element = the lowest element index of `tensor` whose bytes differ between some two ranks of `exchange`
// (elements of the tensor's dtype; bytes when its size is not a multiple of the dtype's), or -1 when every
// rank holds the same bytes. Every rank of the group calls it with the same tensor (name, dtype, size).
// *rounds += the all-gathers spent.
Status locateFirstDifference(const ReplicaTensor& tensor, ReplicaBackend* backend, ReplicaExchange* exchange,
                             void* stream, int64_t* element, uint64_t* rounds);

}  // namespace ringguard
