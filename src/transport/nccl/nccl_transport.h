#pragma once
// Device memory over ncclSend/ncclRecv on a communication stream of its own. The communicator is
// non-blocking (config.blocking = 0): every call returns at once, and the waits of the algorithm poll
// ncclCommGetAsyncError, so a timeout can abort it (ncclCommAbort) instead of hanging. Sends and receives
// posted between two flushes form one NCCL group. The control channel is a host transport (MPI, or c10d).
// A leaf: it takes a unique id and a host transport, and knows nothing of how ranks found each other (the
// runtime's device factory exchanges the id over a Bootstrap).
//
// Two kinds of stream, so transfers overlap the executor's kernels: `stream` (the executor's) produces what
// is sent and consumes what arrives. Each group launch first makes the communication streams wait for all
// the work enqueued on `stream` so far (the trailers sealed, the slots' previous contents applied), and
// then records events that its ops carry (TransportOp::streamEvent) for the executor to wait for.
//
// Lanes: NCCL point-to-point pays tens of microseconds per group on the GPU (the kernels of one stream run
// one after the other, each ramping up and draining), so consecutive slices to a peer go round-robin over
// `lanes` communicators (split from the first), each with a stream of its own, and their groups overlap.
// The k-th op to a peer on a channel takes lane k % lanes on both sides, so sends and receives still match
// in posting order, as on one communicator (docs/GPU.md, "Lanes over NCCL").
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace ringguard {

class NcclTransport final : public Transport {
 public:
  // A fresh unique id (ncclGetUniqueId), as bytes: one rank makes it, every rank passes it to create().
  static Status newUniqueId(std::vector<uint8_t>* out);
  // Collective over the ranks of `control` (any host transport over them, the control channel), from the
  // id rank 0 made. The current CUDA device must be the one this rank uses; `stream` is the executor's
  // (see above). Fails with kTimeout if the communicator is not ready in time.
  static Status create(const std::vector<uint8_t>& id, std::unique_ptr<Transport> control,
                       cudaStream_t stream, std::chrono::milliseconds timeout, int lanes,
                       std::unique_ptr<Transport>* out);
  static constexpr int kMaxLanes = 8;
  ~NcclTransport() override;
  const char* name() const override { return "nccl"; }
  ControlChannel* control() override { return control_->control(); }  // the host transport's
  // Each slice costs an NCCL group (tens of microseconds on the GPU and, for a non-blocking communicator,
  // on the host): large slices, and four in flight so a lane always has the next transfer queued while
  // the executor verifies and reduces (docs/PERFORMANCE.md, "Fourth session").
  size_t defaultSliceBytes() const override { return size_t(128) << 20; }
  int defaultSlots() const override { return 4; }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doFlush() override;
  Status doProgress() override;
  void doAbort() override;
  void doNotePeerStalled(const std::string& why) override { control_->notePeerStalled(why); }

 private:
  struct Lane {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;  // ours: NCCL's kernels of this lane
    std::shared_ptr<void> event;    // the open group's event on this lane (a cudaEvent_t); null: unused
  };
  NcclTransport(std::unique_ptr<Transport> control, std::vector<Lane> lanes, cudaStream_t compute,
                cudaEvent_t computeMark, std::chrono::milliseconds timeout);
  // The lane of the next op to `peer` on `channel` (counted in `posted`), with its group event made.
  Status nextLane(std::vector<uint64_t>& posted, int peer, Channel channel, Lane** lane);
  Status asyncError(const char* what);
  void closeComms();  // finalize + destroy, or abort when that does not finish in time

  std::unique_ptr<Transport> control_;
  std::vector<Lane> lanes_;
  const cudaStream_t compute_;  // the executor's stream
  cudaEvent_t computeMark_;     // re-recorded on compute_ at each launch
  std::chrono::milliseconds timeout_;
  std::vector<uint64_t> sendsPosted_, recvsPosted_;  // per (peer, channel): ops posted so far
  bool groupOpen_ = false;
  uint64_t flushes_ = 0;  // ops posted before flush number n are enqueued once flushes_ >= n
  bool aborted_ = false;

  friend class NcclOp;
};

}  // namespace ringguard
