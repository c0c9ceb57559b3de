#pragma once
// The communicator: the public entry point of the runtime. Public calls validate, enqueue and return; one
// runner at a time makes the transport calls, in queue order: the progress thread, or for host memory the
// caller of a synchronous form (allreduce(), ...) waiting for its collective (docs/design/protocol.md,
// "Threading").
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/core/run_summary.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

// Handle of one enqueued collective.
class Work {
 public:
  Work();
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective finished on this rank and returns its Status. For device buffers it also
  // orders the caller's stream after the results (an event wait, not a device synchronisation).
  Status wait();
  bool isCompleted() const;

  // A Work that has already finished with `status`: for an operation that ran when it was issued (the
  // c10d backend's staged all-gather and allreduce: ringguard/runtime/staged_allgather.h,
  // staged_allreduce.h).
  static std::shared_ptr<Work> completed(Status status);

 private:
  friend class Communicator;
  // Its completion state and the executor's fence (src/runtime/communicator_impl.h): the runtime's types
  // stay out of this header.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One operation of a grouped point-to-point call (Communicator::sendRecvGroupAsync): a send of `count`
// elements of `dtype` from `buffer` to rank `peer`, or a receive of them from `peer` into `buffer` (a send
// only reads it).
struct P2pOp {
  enum class Kind : uint8_t { kSend, kRecv };
  Kind kind = Kind::kSend;
  int peer = -1;
  void* buffer = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};

// Threads: every public call is thread-safe, but collectives are matched across ranks by the order in
// which each rank issued them (the sequence number in every fingerprint), not by the thread that issued
// them. Two threads that issue collectives of the same shape (collective, op, dtype, count, root; for
// sendrecv the peer, tag and count) in a different order on different ranks get each other's results with
// every check passing: each rank sends and receives exactly what the matched collective describes, so no
// fingerprint, CRC or verdict can tell (NCCL and gloo behave alike). Collectives of different shapes fail
// instead, with kFingerprintMismatch on every rank. Issue one communicator's collectives from one thread,
// or in one order on every rank (e.g. under a mutex held across the issue calls), or give each issuing
// thread an issue lane (ringguard/core/issue_lane.h): every call reads the calling thread's lane when it
// enqueues, and the collective's fingerprint carries it with the lane's own number on this communicator,
// so the swap above fails on every rank with kFingerprintMismatch naming both lanes ("lane 'prefetch' #0")
// before any payload moves, and poisons the communicator as any fingerprint mismatch does. sendRecv
// carries the lane (a message sent in one lane and received in another is the receiver's
// kInvalidArgument naming both). Lanes are paired across ranks by name.
class Communicator {
 public:
  // Communicators come from the factories (ringguard/runtime/factories.h, device_factory.h,
  // ringguard/mpi/mpi_communicator.h). The Impl (transport, executor, progress thread, queue;
  // src/runtime/communicator_impl.h) is the runtime's own: it is incomplete outside the library.
  class Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  // Runs what is still queued, then stops the progress thread.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const Options& options() const;
  // The transport's name: "mpi", "shm", "gloo", "nccl", "staged", or "peer" for a device communicator with
  // the one-sided path over peer windows (docs/GPU.md), whose collectives above the window (or that the path
  // does not take) go through the host-driven staged pipeline beneath it.
  const char* transportName() const;
  // What memory the buffers of its collectives are: kDevice for a device communicator.
  MemoryKind memory() const;

  // Enqueues a verified AllReduce of `count` elements. `send` may equal `recv` (in place); both must stay
  // valid until the Work completes. Thread-safe. Invalid arguments complete the Work with
  // kInvalidArgument naming the argument, and every other rank of the collective gets a kPeerError
  // (instead of waiting for this rank). For a device communicator `stream` is the caller's cudaStream_t:
  // the collective reads the inputs after the work already enqueued on it, and Work::wait() orders it
  // after the results. A stream that is being captured into a CUDA graph is refused (kInvalidArgument):
  // the verified collective is host-driven and cannot be captured.
  std::shared_ptr<Work> allreduceAsync(const void* send, void* recv, size_t count, DataType dtype,
                                       ReduceOp op, void* stream = nullptr);
  // The synchronous forms: the Async call's Work, waited for. A host collective runs on the calling thread
  // when no other runner holds the transport (then the progress thread is not even woken).
  Status allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                   void* stream = nullptr);
  Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                       void* stream = nullptr);
  Status allgather(const void* send, void* recv, size_t sendCount, DataType dtype, void* stream = nullptr);
  Status broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                   void* stream = nullptr);
  Status sendRecv(const void* send, size_t sendCount, int dst, void* recv, size_t recvCount, int src,
                  DataType dtype, void* stream = nullptr);
  Status alltoall(const void* send, void* recv, size_t count, DataType dtype, void* stream = nullptr);

  // The other collectives. Every one validates its own arguments (kInvalidArgument naming the argument
  // and the rank, and a kPeerError on the other ranks), is verified slice by slice like allreduce, and
  // takes the caller's stream as allreduceAsync does. Counts are in elements of `dtype`.
  //
  // reduceScatter: `send` holds size() blocks of `recvCount` elements; rank r's `recv` gets block r
  // reduced over all ranks (ncclReduceScatter). In place when recv == send + rank() * recvCount.
  std::shared_ptr<Work> reduceScatterAsync(const void* send, void* recv, size_t recvCount, DataType dtype,
                                           ReduceOp op, void* stream = nullptr);
  // allgather: rank r's `sendCount` elements land at block r of every rank's `recv` (size() blocks;
  // ncclAllGather). In place when send == recv + rank() * sendCount.
  std::shared_ptr<Work> allgatherAsync(const void* send, void* recv, size_t sendCount, DataType dtype,
                                       void* stream = nullptr);
  // broadcast: `root`'s `send` lands in every rank's `recv` (ncclBroadcast; `send` is read on the root
  // only and may be null elsewhere). In place when send == recv.
  std::shared_ptr<Work> broadcastAsync(const void* send, void* recv, size_t count, DataType dtype, int root,
                                       void* stream = nullptr);
  // One verified point-to-point exchange: `sendCount` elements to rank `dst` and `recvCount` from rank
  // `src`, posted together (so two ranks exchanging with each other cannot deadlock). dst < 0 or
  // src < 0: no send or no receive. Messages of one (peer, direction) match in call order; a peer's
  // count that differs from this rank's is an error on both sides naming both counts.
  std::shared_ptr<Work> sendRecvAsync(const void* send, size_t sendCount, int dst, void* recv,
                                      size_t recvCount, int src, DataType dtype, void* stream = nullptr);
  // A group of sends and receives issued as one (ncclGroupStart ... ncclGroupEnd; torch's
  // batch_isend_irecv): they cannot deadlock whatever order each rank lists them in, and each (peer,
  // direction)'s messages still match in list order. The ops are planned into rounds
  // (src/core/p2p_group_plan.h; docs/design/protocol.md, "Grouped send/recv"): round (s, k) is one
  // sendRecvAsync of this rank's k-th send to rank + s and its k-th receive from rank - s (s = 0: a message
  // to itself, whose send and receive must both be in the group), and every rank issues its rounds in
  // ascending (s, k). The two ops of a round may have different dtypes: each direction's fingerprint carries
  // its own, so a peer that disagrees on the dtype or the count fails on both sides as with sendRecvAsync.
  // One Work for the group: it completes when every round did, with the first round's error. An op whose peer
  // is out of range, whose dtype is not one, or whose bytes overflow fails the whole group on this rank
  // before anything is issued (kInvalidArgument naming the op); the peers of its messages then wait until
  // their timeout. The lone ops of NCCL are one-op groups: a rank's send still waits where its receiver has
  // not posted the receive (the peer path's rendezvous), so lone ops need the same order on both ends.
  std::shared_ptr<Work> sendRecvGroupAsync(const std::vector<P2pOp>& ops, void* stream = nullptr);
  // Whether sendRecv between two different ranks of this communicator runs on the device's peer windows (a
  // device communicator of RINGGUARD_DEVICE_TRANSPORT=peer with send/recv channels;
  // docs/design/protocol.md, "Send/recv on the windows"): agreed on every rank when the windows were made.
  bool sendRecvOnPeerWindows() const;
  // alltoall: block p of `send` (sendCounts[p] elements at sendDispls[p]) goes to rank p, and rank p's
  // block for this rank lands at recvDispls[p] (recvCounts[p] elements); vectors of size() entries
  // (MPI_Alltoallv). Each rank's sendCounts[p] must equal rank p's recvCounts[rank()]. Not in place.
  std::shared_ptr<Work> alltoallAsync(const void* send, const std::vector<size_t>& sendCounts,
                                      const std::vector<size_t>& sendDispls, void* recv,
                                      const std::vector<size_t>& recvCounts,
                                      const std::vector<size_t>& recvDispls, DataType dtype,
                                      void* stream = nullptr);
  // Equal splits: `count` elements to and from every rank, blocks in rank order.
  std::shared_ptr<Work> alltoallAsync(const void* send, void* recv, size_t count, DataType dtype,
                                      void* stream = nullptr);

  // A call of `kind` that this rank rejected before it reached the communicator (a binding's own argument
  // checks: the c10d backend's tensor shapes, say), entered in issue order where that collective would
  // have run, so that no peer waits for it until its timeout. Its fingerprint carries no arguments and is
  // flagged "invalid-arguments": when every rank rejected the same call they agree, nothing else happens
  // and the communicator stays usable (each caller reports its own error, as a local check does); when other
  // ranks entered the collective, every rank fails it with the fingerprint mismatch naming this rank's
  // rejected call ("rank 1 has {reduce_scatter op=sum dtype=u8 count=0 seq=4 invalid-arguments}"), at
  // once, and the communicator is poisoned as after any mismatch. Not counted as a collective. Its Work
  // completes OK in the first case and with the mismatch in the second; the caller need not wait for it.
  // Where the peer windows carry `kind` (every call of it enters their order, at any size: the call, or
  // its marker when it runs on the host-driven path above the windows' size) it is declined there (its Work
  // then fails with kInvalidArgument naming the call), else entered on the host-driven path. `bytes` (what
  // the call would have published) no longer decides the route and is ignored; kept for callers.
  static constexpr size_t kUnknownBytes = ~size_t(0);
  std::shared_ptr<Work> rejectedAsync(CollectiveKind kind, void* stream = nullptr,
                                      size_t bytes = kUnknownBytes);

  // Ends this communicator at once (c10d's abort): the collective in progress returns kAborted from its
  // next wait, what is queued and every later call fail with kAborted ("... aborted: <why>"), peers are
  // told (they fail with kPeerError instead of timing out) and the transport is torn down (NCCL:
  // ncclCommAbort). Thread-safe and idempotent; the destructor still joins the progress thread.
  void abort(const std::string& why);
  // This rank is about to destroy the communicator, with nothing issued still running: tells the peers now
  // where the transport has a message for it (the c10d transport), so a peer still waiting in a collective
  // for this rank fails at once ("rank R has left") instead of at its timeout. Call it on every
  // communicator you are about to destroy before destroying the first (each destructor waits, bounded, for
  // the peers' own goodbyes). Nothing but the destructor may follow it. `peersMayBeGone`: the owner saw a
  // failure (of this communicator or of another over the same ranks), so a peer may never say goodbye (it
  // stopped, or hangs): the destructor then waits for nobody, as after a failure of its own. Nothing is
  // sent but the goodbye, after every frame already sent, so a peer still completing its last collective
  // with this rank completes it.
  void leave(bool peersMayBeGone = false);

  // This rank's counters (a consistent snapshot).
  Counters counters() const;
  // What this communicator did so far, by collective kind, with its counters (the run summary's entry;
  // include/ringguard/observability/observability.h).
  CommunicatorSummary summary() const;
  // The first fatal error, or OK. Once set, every call fails with it.
  Status firstError() const;

  // Fault injection of the collectives that start after this call (on this rank: injection happens where
  // a slice is received, so ranks need not agree). Invalid options give kInvalidArgument.
  Status setFault(const FaultOptions& fault);
  FaultOptions fault() const;

 private:
  // sendRecvAsync with a dtype per direction: one round of sendRecvGroupAsync.
  std::shared_ptr<Work> sendRecvRoundAsync(const void* send, size_t sendCount, DataType sendDtype, int dst,
                                           void* recv, size_t recvCount, DataType recvDtype, int src,
                                           void* stream);

  std::unique_ptr<Impl> impl_;
};

}  // namespace ringguard
