#pragma once
// A direct path: collectives a communicator hands to device kernels that need no host work at all (the
// one-sided protocol over peer windows: docs/design/protocol.md, "The one-sided protocol"). The call
// launches on the caller's stream and returns; there is no progress thread, queue or host round trip, so it
// can be captured in a CUDA graph. What a path does not take (accepts* false) goes through the host-driven
// pipeline as before; every rank decides from the same arguments, so ranks route a collective alike.
//
// Errors are asynchronous, as with NCCL: a kernel leaves them in mapped memory and poll() turns the first
// into a Status naming the peer, the chunk and the collective's epoch. The communicator polls before each
// direct launch and at Work::wait(), and poisons itself with the first error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/function_ref.h"
#include "ringguard/core/options.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

struct AlltoallLayout;  // algorithms/collectives.h

// A call of a direct path that finished, with its device times (the timeline's span of it): the kind's name
// (collectiveKindName), the path's sequence number, its start and duration on the host's steady clock
// (trace::nowNs) and the bytes it moved as the communicator counts them.
struct DirectCallTime {
  const char* name = "";
  uint64_t seq = 0;
  uint64_t startNs = 0;
  uint64_t durNs = 0;
  uint64_t bytes = 0;
};

class DirectPath {
 public:
  virtual ~DirectPath() = default;
  virtual const char* name() const = 0;
  // Whether the communicator keeps its transport's name (transportName()): a path that stands in for the
  // transport only where nothing crosses a link (one rank: one_rank_path.h).
  virtual bool namedByTransport() const { return false; }
  // Whether poll() may turn non-OK after a launch returned (kernels that fail later): the communicator's
  // watchdog reads it then. A path whose launches report every error at once needs no watchdog.
  virtual bool reportsLater() const { return true; }
  virtual bool acceptsAllreduce(size_t count, DataType dtype, ReduceOp op) const = 0;
  // Enqueues the allreduce on `stream` (the caller's cudaStream_t); kInvalidArgument if refused.
  virtual Status allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           uint32_t lane, void* stream) = 0;
  // All-gather, broadcast and reduce-scatter, as the allreduce: a path that does not take them says so.
  virtual bool acceptsAllgather(size_t sendCount, DataType dtype) const { return false; }
  virtual Status allgather(const void* send, void* recv, size_t sendCount, DataType dtype, uint32_t lane,
                           void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no allgather");
  }
  virtual bool acceptsBroadcast(size_t count, DataType dtype) const { return false; }
  virtual Status broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                           uint32_t lane, void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no broadcast");
  }
  virtual bool acceptsReduceScatter(size_t recvCount, DataType dtype, ReduceOp op) const { return false; }
  virtual Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                               uint32_t lane, void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no reduce_scatter");
  }
  // All-to-all (Communicator::alltoallAsync's layout, vectors of size() entries). `splits` false is the equal
  // form (alltoallAsync with one count: `count` to and from every rank, which acceptsAlltoall reads), true
  // the split form (the vectors; `count` unused): every rank makes the same call, so every rank routes it
  // alike.
  virtual bool acceptsAlltoall(size_t count, DataType dtype, bool splits) const { return false; }
  virtual Status alltoall(const void* send, void* recv, const AlltoallLayout& layout, DataType dtype,
                          bool splits, uint32_t lane, void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no alltoall");
  }
  // One message each way (Communicator::sendRecvAsync's arguments, checked already; dst or src -1: none):
  // both ends of a message route it alike from what they have alike (the path's settings and whether the
  // other end is this rank), and message numbers of a pair count only the messages this path takes. Each
  // direction has its dtype (a grouped call's round may send one and receive another).
  virtual bool acceptsSendRecv(size_t sendCount, int dst, size_t recvCount, int src, DataType dtype) const {
    return false;
  }
  // Whether this path takes every send/recv between two other ranks of the communicator (the answer of
  // acceptsSendRecv for any such call; the same on every rank): the c10d backend routes CUDA tensors'
  // point-to-point by it.
  virtual bool takesPeerSendRecv() const { return false; }
  virtual Status sendRecv(const void* send, size_t sendCount, int dst, void* recv, size_t recvCount, int src,
                          DataType sendDtype, DataType recvDtype, uint32_t lane, void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no send/recv");
  }
  // A call of `kind` whose arguments failed this rank's checks, where the path would have taken it
  // (acceptsX of what the call named): enqueued on `stream` in the path's order so that the other ranks'
  // kernels, which did take the call, fail at once naming this rank instead of waiting for it until their
  // deadline (docs/design/protocol.md, "A call rejected on one rank"). Not for send/recv.
  // Whether every call of `kind` enters this path's order of collectives, whatever its size and other
  // arguments: the call itself where the path takes it, else a decline (a call this rank rejected) or a
  // marker (offPath: a call above the path's size, run on the pipeline). Then Communicator::rejectedAsync,
  // which knows only the kind, declines here, and ranks whose calls of one collective are routed apart
  // fail at once naming both instead of waiting for each other until their deadlines.
  virtual bool declines(CollectiveKind kind) const { return false; }
  virtual Status decline(CollectiveKind kind, uint32_t lane, void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no decline");
  }
  // The marker of a call of a kind this path declines() that it does not take (acceptsX false: above its
  // size, say) and that runs on the host-driven pipeline instead, enqueued on `stream` in the path's order
  // with the call's fingerprint flagged kFingerprintOffWindows: every rank that routed the call alike
  // agrees on the marker; a rank whose call ran on the path fails at once, and so does this one.
  virtual Status offPath(CollectiveKind kind, size_t count, DataType dtype, ReduceOp op, int root,
                         uint32_t lane, void* stream) {
    return Status(StatusCode::kInvalidArgument, std::string(name()) + " path: no marker");
  }
  // Hands `take` the calls that finished since the last time, in order, when the path times its kernels (the
  // peer path while the timeline is on: docs/GPU.md, "Timeline spans"); returns the calls whose times were
  // lost (overwritten before they were taken). Non-blocking; a call still running comes at a later take.
  virtual uint64_t takeFinishedCalls(FunctionRef<void(const DirectCallTime&)> take) { return 0; }
  // The first error the kernels reported so far (non-blocking), OK when none.
  virtual Status poll() = 0;
  // Chunk reads that failed their CRC and were re-read, and reads corrupted by fault injection, so far.
  virtual void faultCounts(uint64_t* detected, uint64_t* injected) = 0;
  // The watchdog's round (direct_watchdog.h, every interval): what the path watches besides its kernels'
  // errors (the peer path: whether a peer's process exited, so that its kernels stop waiting for it).
  virtual void watch() {}
  // Releases every kernel spinning in this path (they end with kAborted).
  virtual void abort() = 0;
  // Fault injection of later collectives (the communicator's FaultOptions: probability per chunk read, seed,
  // mode and its parameters; the schedule of exact injections is the host path's only).
  virtual void setFault(const FaultOptions& fault) = 0;
};

}  // namespace ringguard
