#pragma once
// Comparison of the fingerprints every replica all-gathered (docs/REPLICAS.md): which tensors differ,
// which ranks are the odd ones, and which rank may serve as the source of a repair. A pure function of
// the gathered words, so every rank reaches the same result without another exchange.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

// What one rank contributes to the all-gather: a fixed header and one CRC-32 per tensor.
struct ReplicaMessage {
  static constexpr uint32_t kMagic = 0x52504c31u;  // "RPL1"
  static constexpr size_t kHeaderWords = 5;        // magic, step (low, high), tensor count, layout hash
  uint64_t step = 0;
  uint32_t layoutHash = 0;
  std::vector<uint32_t> crcs;

  std::vector<uint32_t> encode() const;
  // kCorruption naming `rank` when `words` is not a message (wrong length or magic).
  static Status decode(const uint32_t* words, size_t n, int rank, ReplicaMessage* out);
};

struct ReplicaComparison {
  int replicas = 0;
  bool mismatch = false;
  // Every rank holds a majority value for every differing tensor: the odd ranks are named by majority.
  // Never true with 2 replicas (one against one names nobody).
  bool majority = false;
  // With a majority: the ranks that differ from it. Without: every rank whose fingerprints are not those
  // of every other rank (with 2 replicas: both).
  std::vector<int> oddRanks;
  int source = -1;              // with a majority: the lowest rank that agrees with it on every tensor
  std::vector<size_t> tensors;  // indices of the tensors whose CRCs differ across ranks, ascending
  // Set when the ranks checked different steps or list different tensors: nothing can be compared.
  std::string structural;

  std::string describe(const std::vector<std::string>& names) const;  // for logs and errors
};

// Compares the decoded messages of every rank (index = rank in the replica group).
ReplicaComparison compareReplicas(const std::vector<ReplicaMessage>& messages);

}  // namespace ringguard
