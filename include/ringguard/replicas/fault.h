#pragma once
// Fault injection for the replica check (docs/REPLICAS.md): flip one chosen bit of one chosen element of
// one chosen tensor on one chosen rank, at a chosen optimizer step (and the `repeat - 1` steps after it:
// a persistently faulty device). Spelled as RINGGUARD_REPLICA_FAULT and Python's
// set_fault(replica=...): "rank=1,step=5,tensor=param:fc1.weight,element=3,bit=30,repeat=1".
#include <cstddef>
#include <cstdint>
#include <string>

#include "ringguard/core/status.h"
#include "ringguard/replicas/fingerprint.h"

namespace ringguard {

struct ReplicaFault {
  int rank = 0;        // rank in the replica group
  uint64_t step = 0;   // the optimizer step (0-based) whose update it damages
  std::string tensor;  // a tensor's name, or "#<index>" into the checked list
  uint64_t element = 0;
  uint32_t bit = 0;     // bit of the element, 0 = least significant (little-endian element bytes)
  uint64_t repeat = 1;  // steps hit from `step` on

  bool hits(int rankInGroup, uint64_t atStep) const {
    return rankInGroup == rank && atStep >= step && atStep - step < repeat;
  }
  std::string toString() const;  // the spec text parseReplicaFault reads back
};

// Parses the spec; kInvalidArgument naming the key and the value for an unknown or missing key (rank,
// step and tensor are required) or a value out of range. Empty text: *enabled = false.
Status parseReplicaFault(const std::string& text, ReplicaFault* out, bool* enabled);

// Where the flip lands in `tensors`: the tensor index, its byte offset and the mask. kInvalidArgument
// naming the tensor and its size when the tensor is not in the list, the element is past its end or the
// bit is past the element's width.
Status locateReplicaFault(const ReplicaFault& f, const std::vector<ReplicaTensor>& tensors, size_t* index,
                          size_t* byteOffset, uint8_t* mask);

}  // namespace ringguard
