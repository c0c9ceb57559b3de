#pragma once
// The "ringguard" c10d backend: torch.distributed collectives whose every byte on a link is CRC-verified
// (docs/TORCH.md for users, docs/design/torch_integration.md for the design). The torch layer: this header
// exposes torch types.
//
// Collectives run on ringguard communicators created per device type: CPU tensors over MPI when started by
// mpirun, else over a C10dTransport (CRC-framed slices on the point-to-point send/recv of a Gloo backend of
// the same ranks); CUDA tensors over
// NCCL (its unique id passed through the c10d Store, a C10dTransport as control channel) when every rank has
// a GPU of its own, else the host-staged transport on top of another C10dTransport. broadcast and allgather
// are verified allreduces of bytes in which all but one rank contribute zeros: exact for every dtype, at
// about twice the traffic of a dedicated broadcast or all-gather.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {

class PeerLanes;

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
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
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
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) override;

  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // Finishes what was issued, then joins every thread and releases the communicators. Idempotent.
  void shutdown() override;
  // Fails what is queued and the collective in progress at once (kAborted, peers told), then as shutdown().
  // Point-to-point operations in flight still end at their timeout.
  void abort() override;

  // Integrity counters, summed over this group's communicators.
  Counters counters() const;
  // Fault injection for collectives issued from now on (RINGGUARD_FAULT_* names, as `options` above).
  void setFault(const std::map<std::string, std::string>& fault);
  std::map<std::string, std::string> fault() const;
  // "mpi", "gloo", "staged" or "nccl" for a device type ("cpu", "cuda") whose communicator exists, else "".
  std::string transport(const std::string& deviceType) const;

 private:
  struct Pending;
  class RgWork;

  Communicator* communicatorFor(const at::Tensor& t, const char* op);
  // A RINGGUARD_* option: from pg_options, else the environment, else null.
  const char* option(const char* name) const;
  bool useMpi();
  Status createMpiCommunicator(const std::vector<int>& globalRanks);  // collective over the group
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
  c10::intrusive_ptr<c10d::Work> p2p(const char* op, at::Tensor& t, int peer, int tag, bool isSend);
  void completionLoop();
  void stop(bool abort);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  const std::map<std::string, std::string> optionMap_;
  ringguard::Options options_;
  FaultOptions fault_;

  mutable std::mutex mutex_;  // guards the communicators and the pending queue
  std::condition_variable cv_;
  std::unique_ptr<Communicator> cpu_;
  std::unique_ptr<Communicator> cuda_;
  std::unique_ptr<PeerLanes> p2p_;
  int cudaDevice_ = -1;
  std::deque<std::shared_ptr<Pending>> pending_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread completion_;
  std::atomic<uint64_t> sequence_{0};  // collectives issued
};

}  // namespace ringguard
