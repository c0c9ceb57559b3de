#pragma once
// The verified collectives, one per file in src/algorithms/, each written against Transport and Executor
// only and run on the shared pipeline (docs/design/protocol.md). Each runs on the communicator's progress
// thread; on success every rank's result is bit-identical to a fault-free run, on failure every rank
// involved returns an error and the outputs are unspecified. Each has an argument check the communicator
// runs on the caller's thread before enqueueing (kInvalidArgument naming the argument).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/agreement.h"
#include "executor/executor.h"
#include "ringguard/core/types.h"

namespace ringguard {

// What an argument check needs to know of the communicator.
struct CollectiveShape {
  int rank = 0;
  int size = 1;
  size_t sliceBytes = 1;
};

// Ring: `send` and `recv` hold `count` elements; `send` may equal `recv`.
Status checkAllreduceArgs(const CollectiveShape& c, const void* send, const void* recv, size_t count,
                          DataType dtype, ReduceOp op);
Status allreduce(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                 DataType dtype, ReduceOp op);

// Ring reduce steps: `send` holds size blocks of `recvCount`; `recv` gets block rank, reduced. In place
// when recv == send + rank * recvCount.
Status checkReduceScatterArgs(const CollectiveShape& c, const void* send, const void* recv, size_t recvCount,
                              DataType dtype, ReduceOp op);
Status reduceScatter(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv,
                     size_t recvCount, DataType dtype, ReduceOp op);

// Ring copy steps, received slices verified in place in `recv` (size blocks of `sendCount`). In place
// when send == recv + rank * sendCount.
Status checkAllgatherArgs(const CollectiveShape& c, const void* send, const void* recv, size_t sendCount,
                          DataType dtype);
Status allgather(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t sendCount,
                 DataType dtype);

// Pipelined chain root, root + 1, ...: `root`'s `send` lands in every `recv` (verified in place).
Status checkBroadcastArgs(const CollectiveShape& c, const void* send, const void* recv, size_t count,
                          DataType dtype, int root);
Status broadcast(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                 DataType dtype, int root);

// Pairwise exchange in N - 1 rounds (round k: to rank + k, from rank - k), verified in place. Counts and
// displacements in elements, size entries each.
struct AlltoallLayout {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
};
Status checkAlltoallArgs(const CollectiveShape& c, const void* send, const void* recv,
                         const AlltoallLayout& l, DataType dtype);
Status alltoall(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv,
                const AlltoallLayout& layout, DataType dtype);

// One verified point-to-point exchange (a send to `dst` and/or a receive from `src`; -1: none). `sendSeq`
// and `recvSeq` number the messages of each (peer, direction), so only the two ends take part.
struct PeerExchange {
  const void* send = nullptr;
  size_t sendCount = 0;
  int dst = -1;
  uint64_t sendSeq = 0;
  void* recv = nullptr;
  size_t recvCount = 0;
  int src = -1;
  uint64_t recvSeq = 0;
  // Both ends give the same (non-negative) tag; it travels in the fingerprint, so a message sent with
  // another tag is an error on both sides naming both (messages match in order, not by tag).
  int32_t tag = 0;
  // The receive's fingerprint frame from `src`, already taken off the control channel by the caller (a
  // receive from any source: PeerLanes::recvAny, which learns the source from it), and whether only its CRC
  // failed (ControlChannel::probeRepairable). Null: sendRecv takes it itself.
  const std::vector<uint8_t>* takenFingerprint = nullptr;
  bool takenDamaged = false;
  // A grouped call's round that sends one dtype and receives another (Communicator::sendRecvGroupAsync)
  // runs in bytes: the call's dtype is kUint8 and both counts are bytes, while each direction's fingerprint
  // carries its own dtype and element count (below), so ends that disagree on either still fail on both
  // sides before any payload. The slices of a message are the same in bytes as in any dtype
  // (RingSchedule::sliceElementsFor), so such a message meets a receive of its real dtype.
  bool inBytes = false;
  DataType sendDtype = DataType::kUint8, recvDtype = DataType::kUint8;
};
Status checkSendRecvArgs(const CollectiveShape& c, const PeerExchange& x, DataType dtype);
Status sendRecv(const CollectiveContext& ctx, Executor* exec, const PeerExchange& x, DataType dtype);

}  // namespace ringguard
