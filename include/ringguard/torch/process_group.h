#pragma once
// The "ringguard" c10d backend: torch.distributed collectives whose every byte on a link is CRC-verified
// (docs/TORCH.md for users, docs/design/torch_integration.md for the design). The torch layer: this header
// exposes torch types.
//
// Collectives run on ringguard communicators created per device type: CPU tensors over MPI when started by
// mpirun, else over a C10dTransport (CRC-framed slices on the point-to-point send/recv of a Gloo backend of
// the same ranks); CUDA tensors over
// NCCL (its unique id passed through the c10d Store, a C10dTransport as control channel) when every rank has
// a GPU of its own, else the host-staged transport on top of another C10dTransport. The class is defined
// over several files of src/torch/, one concern each (docs/ARCHITECTURE.md, "The torch layer").
#include <torch/headeronly/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/core/settings.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {
namespace cuda {
class DeviceStager;  // ringguard/runtime/device_stager.h
}  // namespace cuda
}  // namespace ringguard

// torch 2.14 renamed the tensor forms of the c10d Backend virtuals (all_gather_single for _allgather_base,
// reduce_scatter_single for _reduce_scatter_base, all_to_all_single for alltoall_base, the *_single_coalesced
// forms, and added gather_single / gather_into_tensor); each old name stays as a virtual alias that forwards
// to the new one and back. ProcessGroupRingguard implements the old names and, on 2.14 and later, overrides
// the new ones too (forwarding to the same code), so a call through either name reaches it directly.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
#define RINGGUARD_C10D_SINGLE_NAMES 1
#else
#define RINGGUARD_C10D_SINGLE_NAMES 0
#endif

namespace ringguard {

class PointToPoint;  // ringguard/runtime/point_to_point.h
class C10dWork;
class CompletionLane;
struct PendingCollective;
struct HeldDeviceP2p;  // device_point_to_point.cc
// Send/recv ops of CUDA tensors on the peer windows, each with its pending completion.
using DeviceP2pOps = std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>>;

class ProcessGroupRingguard : public c10d::Backend {
 public:
  // `options` maps RINGGUARD_* names to values and overrides the environment; an unknown name or a bad
  // value throws (ValueError in Python) naming it. `gloo` spans the same ranks: its send/recv carry our
  // framed slices. Not collective: communicators are created on first use.
  // `globalRanks[i]` is the world rank of group rank i (empty: the identity). Under mpirun (or with
  // RINGGUARD_CPU_TRANSPORT=mpi) CPU tensors ride MPI over exactly those ranks, which requires torch's world
  // ranks to be the MPI ranks (ringguard.init_from_mpi() sets them so).
  ProcessGroupRingguard(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                        const std::map<std::string, std::string>& options,
                        c10::intrusive_ptr<c10d::Backend> gloo, const std::vector<int>& globalRanks = {});
  ~ProcessGroupRingguard() override;

  const std::string getBackendName() const override { return "ringguard"; }
  c10::intrusive_ptr<Backend::Options> getBackendOptions() override;

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // A verified one-element allreduce: on the CUDA communicator for barrier(device_ids=[i]) with CUDA in use,
  // else on the CPU one.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  // torch.distributed.monitored_barrier over the c10d Store: every rank checks in, rank 0 waits for each
  // (opts.timeout, else the group's) and tells every rank the outcome, so all ranks raise the same error
  // naming the ranks that did not arrive (the first one, or all of them with waitAllRanks).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
  // Verified messages (CRC-checked, resent when damaged); sends and recvs between two ranks must match in
  // order. CUDA tensors are staged through host memory.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int srcRank, int tag) override;

  // Everything else fails with a message that names the op, the dtype and the device.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& t,
                                                     const c10d::AllreduceCoalescedOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& t,
                                                  const c10d::AllreduceOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions& o) override;
  // dist.all_gather_coalesced: out[r][i] gets rank r's in[i]; one verified all-gather of the inputs packed.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                     std::vector<at::Tensor>& in,
                                                     const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out,
                                        std::vector<at::Tensor>& in, const c10d::GatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out,
                                         std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out,
                                                std::vector<std::vector<at::Tensor>>& in,
                                                const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
      const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& outSplit, std::vector<int64_t>& inSplit,
                                               const c10d::AllToAllOptions& o) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                          const c10d::AllToAllOptions& o) override;
  // dist.recv / irecv without a source: the first message from a peer whose receive is free for it, by
  // PointToPoint::recvAny's matching rule (receives match in issue order; among the peers whose message is
  // there, the lowest rank). The Work's sourceRank() names the sender. Count, dtype and tag are checked
  // against the sender's as recv's are: a mismatch fails both sides.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) override;
  // gather into one flat tensor on the root (size() x the input, blocks in rank order); torch names it
  // gather_single / gather_into_tensor from 2.14 on. Non-roots' output is not touched.
  c10::intrusive_ptr<c10d::Work> gatherSingle(at::Tensor& out, at::Tensor& in, const c10d::GatherOptions& o);

#if RINGGUARD_C10D_SINGLE_NAMES
  c10::intrusive_ptr<c10d::Work> all_gather_single(
      at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o = c10d::AllgatherOptions()) override {
    return _allgather_base(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
      const c10d::AllgatherOptions& o = c10d::AllgatherOptions()) override {
    return allgather_into_tensor_coalesced(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& out, at::Tensor& in,
      const c10d::ReduceScatterOptions& o = c10d::ReduceScatterOptions()) override {
    return _reduce_scatter_base(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
      const c10d::ReduceScatterOptions& o = c10d::ReduceScatterOptions()) override {
    return reduce_scatter_tensor_coalesced(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> all_to_all_single(
      at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplit, std::vector<int64_t>& inSplit,
      const c10d::AllToAllOptions& o = c10d::AllToAllOptions()) override {
    return alltoall_base(out, in, outSplit, inSplit, o);
  }
  c10::intrusive_ptr<c10d::Work> gather_single(
      at::Tensor& out, at::Tensor& in, const c10d::GatherOptions& o = c10d::GatherOptions()) override {
    return gatherSingle(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(
      at::Tensor& out, at::Tensor& in, const c10d::GatherOptions& o = c10d::GatherOptions()) override {
    return gatherSingle(out, in, o);
  }
#endif

  // Coalescing (torch.distributed.batch_isend_irecv, _coalescing_manager(device=...)): between
  // startCoalescing and endCoalescing every operation issued on this group starts at once as usual (the lanes
  // already keep sends and receives from waiting for each other), except the send/recv of CUDA tensors on
  // the device's peer windows (p2p), which are collected and issued at endCoalescing as one grouped call
  // (Communicator::sendRecvGroupAsync) on the caller's current stream; endCoalescing returns one Work that
  // completes when all of them have (the first error, if any), or null when nothing was issued.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // Finishes what was issued, then joins every thread and releases the communicators. Idempotent.
  void shutdown() override;
  // Fails what is queued and the collective in progress at once (kAborted, peers told), then as shutdown().
  // Point-to-point operations in flight still end at their timeout.
  void abort() override;

  // Aborts the group's communicators with `why` and leaves the rest to shutdown() or abort(): what is queued
  // (kernels on a stream included: they end at their entry) and every later collective fail with kAborted,
  // "rank R aborted: <why>", and the peers are told. The replica check's gate (docs/REPLICAS.md) on a
  // verdict it raises. Thread-safe.
  void abortWith(const std::string& why);
  // The collectives' timeout (RINGGUARD_TIMEOUT_MS or the group's options).
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // Integrity counters, summed over this group's communicators.
  Counters counters() const;
  // Fault injection for collectives issued from now on (RINGGUARD_FAULT_* names, as `options` above).
  void setFault(const std::map<std::string, std::string>& fault);
  std::map<std::string, std::string> fault() const;
  // "mpi", "gloo", "staged" or "nccl" for a device type ("cpu", "cuda") whose communicator exists, else "".
  std::string transport(const std::string& deviceType) const;
  // The replica check's all-gather of a few host words (python/ringguard/replicas.py): `mine` from every
  // rank into *all in rank order, by the group's CPU communicator's synchronous all-gather on the calling
  // thread. It is one collective of the group like any other (queued after everything the group issued
  // before it, held send/recv released first), without a c10d Work, Future or completion lane: through
  // c10d, 64 bytes took ~110 us at one rank on the 2-core dev machine, almost all of it hand-offs.
  Status allgatherHostWords(const std::vector<uint32_t>& mine, std::vector<uint32_t>* all);
  // The same for the replica check's device message (src/torch/python/replica_bindings.cc): `in` (int32,
  // contiguous, on this group's CUDA device) from every rank into `out` (size() times as many, rank-major),
  // on the current stream, by the group's CUDA communicator itself, waited for as Work::wait() waits (the
  // stream ordered after the result; on the direct paths, peer windows or one rank, nothing waits on the
  // host). Through c10d the Work's wait() handed the collective to the completion lane's thread and back.
  // Like allgatherHostWords it takes neither the downgrade engine's staged all-gather nor a c10d sequence
  // number (the same on every rank, so the ranks' orders still match).
  Status allgatherDeviceWords(const at::Tensor& in, const at::Tensor& out);
  // All-gathers of CUDA tensors (allgather, all_gather_into_tensor) that ran as the all_gather family's
  // staged_chunked variant (docs/DOWNGRADE.md) and succeeded.
  uint64_t stagedAllgathers() const { return stagedAllgathers_.load(); }
  // Allreduces of CUDA tensors (allreduce; allreduce_coalesced: one per tensor) that ran as the all_reduce
  // family's staged_chunked variant (docs/DOWNGRADE.md) and succeeded.
  uint64_t stagedAllreduces() const { return stagedAllreduces_.load(); }

 private:
  using RgWork = C10dWork;

  Communicator* communicatorFor(const at::Tensor& t, const char* op);
  // A RINGGUARD_* option: from pg_options, else the environment, else null.
  const char* option(const char* name) const;
  SettingLookup lookup() const;  // option() as a SettingLookup
  // The CPU communicator over MPI or the Store, as the bootstrap layer chooses (collective over the group).
  void createCpuCommunicator(const std::vector<int>& globalRanks);
  // Starts one collective of the communicator of `buffer`'s device (`start` gets it and the caller's
  // stream) and returns its c10d Work; `after` runs on success before the Work completes. The Work keeps
  // `buffer`, the outputs and `keep` (inputs the collective reads) alive until it completes.
  using Start = std::function<std::shared_ptr<ringguard::Work>(Communicator*, void* stream)>;
  c10::intrusive_ptr<c10d::Work> launch(const char* op, const at::Tensor& buffer, Start start,
                                        std::vector<at::Tensor> outputs, std::function<void()> after,
                                        bool nestedOutputs = false, std::vector<at::Tensor> keep = {});
  // An allreduce of `buffer` in place.
  c10::intrusive_ptr<c10d::Work> launchAllreduce(const char* op, const at::Tensor& buffer, size_t count,
                                                 DataType dtype, ReduceOp rop,
                                                 std::vector<at::Tensor> outputs,
                                                 std::function<void()> after);
  // Gather of `in` (flat, `dt` elements) into `out` (flat, size() blocks in rank order; root only) over the
  // all-to-all.
  c10::intrusive_ptr<c10d::Work> launchGather(const char* op, const at::Tensor& in, const at::Tensor& out,
                                              int root, std::vector<at::Tensor> outputs,
                                              std::function<void()> after, bool nestedOutputs, DataType dt);
  // peer kAnySource (a receive only): recvAnysource.
  static constexpr int kAnySource = -1;
  c10::intrusive_ptr<c10d::Work> p2p(const char* op, at::Tensor& t, int peer, int tag, bool isSend);
  // Whether the send/recv of CUDA tensors run on the peer windows of the group's CUDA communicator
  // (Communicator::sendRecvOnPeerWindows, agreed on every rank), then in *comm; else they take the lanes
  // through host memory. With `make`, the communicator is made here when RINGGUARD_DEVICE_TRANSPORT=peer
  // names the windows and no CUDA collective made it yet: then, as with NCCL, the group's first CUDA
  // operation must involve every rank. Without it (a receive from any source) a named peer transport
  // answers true, *comm null.
  bool peerSendRecv(const at::Tensor& t, const char* op, bool make, Communicator** comm);
  // send/recv of a CUDA tensor on the peer windows of `comm` (device_point_to_point.cc): one op of the
  // coalescing block's group, or a group of its own outside a block. Tags are not used (as NCCL's).
  c10::intrusive_ptr<c10d::Work> deviceP2p(const char* op, at::Tensor& t, int peer, bool isSend,
                                           Communicator* comm);
  // Issues `ops` as one grouped call on `stream` (a cudaStream_t) of `device` and queues each op's
  // completion.
  // An op whose issue threw is not handed to the lane (its `work` stays null): failNotHandedOver
  // (torch/completion.h) fails it.
  void issueDeviceP2p(const DeviceP2pOps& ops, int device, void* stream);
  // The lone send/recv of CUDA tensors on the peer windows are held (device_point_to_point.cc) and issued
  // together as one grouped call when released: by a wait on one of them, or by any other ringguard call of
  // the thread that held them. releaseHeldP2p releases what the calling thread holds on every group, in the
  // order it held it; nothing when none is held. Called first by every other operation of the group.
  static void releaseHeldP2p();
  friend struct HeldDeviceP2p;  // issues through issueDeviceP2p
  // startCoalescing: the ops this thread holds on this group for the current stream, taken to join the block
  // (`irecv` then a batch with the matching `isend`, on every rank, is one exchange); *device their device.
  DeviceP2pOps takeHeldForBlock(int* device);
  // At stop(): the held ops issued (shutdown) or failed (abort), and a block's ops that never reached
  // endCoalescing failed; none is left after.
  void endDeviceP2p(bool abort);
  // Whether a collective of `family` ("all_gather", "all_reduce") on `t` runs as the staged_chunked
  // variant: a CUDA tensor while the process's downgrade engine (ringguard/policy/process_engine.h) has
  // selected it, read when the collective is issued.
  bool stagedSelected(const char* family, const at::Tensor& t) const;
  // A Start for launch() that runs `run` (a staged collective through pinned host memory over the CPU
  // communicator) on the issuing thread with the group's device stager on the caller's stream of `device`,
  // adds `calls` to `*done` when it succeeded, and returns its finished Work.
  Start stagedStart(int device, std::function<Status(HostStager&)> run, std::atomic<uint64_t>* done,
                    uint64_t calls);
  // The staged all-gather of `count` elements of `send` into `recv` (CUDA).
  Start stagedAllgatherStart(const at::Tensor& send, const at::Tensor& recv, size_t count, DataType dt);
  // The staged allreduce of each of `tensors` (CUDA, one device; `dts` their dtypes) in place, in order.
  Start stagedAllreduceStart(const std::vector<at::Tensor>& tensors, const std::vector<DataType>& dts,
                             ReduceOp op);
  // One rank and a premul_sum op: the engine refuses it (nothing is reduced, so nothing would scale), NCCL
  // returns input x factor. Returns `t` times the factor (rounded to its dtype, as the engine rounds it):
  // `t` itself, scaled, when `inPlace`, else a new tensor; *op becomes kSum, which copies on one rank.
  // Any other case returns `t` untouched.
  at::Tensor premulOnOneRank(const at::Tensor& t, ReduceOp* op, bool inPlace) const;
  // The handler of every group collective's override (a function-try-block): the call threw before it
  // reached a communicator (its arguments were rejected), so it enters its place on the communicator the
  // call would have used (`t`'s device; Communicator::rejectedAsync, as `kind`, the engine collective the
  // override runs): ranks that entered that collective fail at once with the mismatch naming this call
  // instead of waiting out their timeout, and if every rank rejected it the group stays usable. Then it
  // rethrows. Only the outermost override of a call enters it (one override may call another). `what` says
  // what `t`'s bytes are to the bytes the call would have published, which the peer windows route by: where
  // known, a call the windows would have taken is declined there (the others' kernels took it); where not
  // (the coalesced forms pack several tensors, an all-to-all's form is not known here), it is entered on the
  // host-driven path, as every rejection was before.
  enum class RejectedSize : uint8_t {
    kUnknown,
    kPublished,  // t is what the collective publishes (an allreduce's, a broadcast's, an all-gather input)
    kGatheredOutput,   // t is an all-gather's output: size() x what it publishes
    kScatteredOutput,  // t is a reduce-scatter's output: what it publishes / size()
  };
  [[noreturn]] void rejected(CollectiveKind kind, const at::Tensor& t,
                             RejectedSize what = RejectedSize::kUnknown);
  // Records `work` while coalescing.
  void coalesce(const c10::intrusive_ptr<c10d::Work>& work);
  void stop(bool abort);
  // Whether any of this group's communicators or its point-to-point lanes failed.
  bool anyFailed() const;

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  const std::map<std::string, std::string> optionMap_;
  ringguard::Options options_;
  FaultOptions fault_;

  mutable std::mutex mutex_;  // guards the communicators
  std::unique_ptr<Communicator> cpu_;
  std::unique_ptr<Communicator> cuda_;
  std::unique_ptr<PointToPoint> p2p_;
  // allgatherHostWords and allgatherDeviceWords calls still using cpu_ or cuda_ outside the lock: stop()
  // waits for them to end (after its abort, at once) before it releases the communicators.
  int wordsInFlight_ = 0;
  std::condition_variable wordsDone_;
  Status enterWordsCall(const char* op);  // counts one, or refuses after stop()
  void leaveWordsCall();
  int cudaDevice_ = -1;
  // One completion lane per communicator (src/torch/completion.h), so a CPU collective never waits behind
  // an earlier CUDA one.
  std::unique_ptr<CompletionLane> cpuLane_;
  // The staged collectives: their device stager (pinned blocks cached across calls), made on first use.
  uint64_t stagedChunkBytes_ = 0;  // RINGGUARD_STAGED_CHUNK_BYTES
  std::mutex stagedMutex_;         // guards stager_ and serialises the staged collectives
  std::unique_ptr<cuda::DeviceStager> stager_;
  std::atomic<uint64_t> stagedAllgathers_{0};
  std::atomic<uint64_t> stagedAllreduces_{0};
  std::unique_ptr<CompletionLane> cudaLane_;
  bool stopped_ = false;
  const char* stoppedBy_ = "shutdown()";  // what stopped the group, for the errors of later calls
  std::atomic<uint64_t> sequence_{0};     // collectives issued
  uint64_t monitoredBarriers_ = 0;        // monitored barriers entered (their Store keys)
  std::mutex coalescingMutex_;            // guards the two below
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  // The block's send/recv of CUDA tensors on the peer windows, issued at endCoalescing (guarded as above).
  DeviceP2pOps deviceP2p_;
  int deviceP2pDevice_ = -1;
  // Shared with the held ops' Works, whose wait() releases them (made at the group's first lone op on the
  // windows; outlives the group in them).
  std::shared_ptr<HeldDeviceP2p> heldP2p_;
};

}  // namespace ringguard
