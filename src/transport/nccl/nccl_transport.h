#pragma once
// Device memory over ncclSend/ncclRecv on a communication stream of its own. The communicator is
// non-blocking (config.blocking = 0): every call returns at once, and the waits of the algorithm poll
// ncclCommGetAsyncError, so a timeout can abort it (ncclCommAbort) instead of hanging. Sends and receives
// posted between two flushes form one NCCL group. The control channel is a host transport (MPI, or c10d).
//
// Two streams, so transfers overlap the executor's kernels: `stream` (the executor's) produces what is
// sent and consumes what arrives. Each group launch first makes the communication stream wait for all the
// work enqueued on `stream` so far (the trailers sealed, the slots' previous contents applied), and then
// records an event that its ops carry (TransportOp::streamEvent) for the executor to wait for.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <memory>

#include "ringguard/transport/transport.h"

namespace ringguard {

class NcclTransport final : public Transport {
 public:
  // Collective over `comm`: rank 0 creates the NCCL unique id and broadcasts it over MPI. The current CUDA
  // device must be the one this rank uses; `stream` is the executor's (see above). Fails with kTimeout if the
  // communicator is not ready in time.
  static Status create(MPI_Comm comm, cudaStream_t stream, std::chrono::milliseconds timeout,
                       std::unique_ptr<Transport>* out);
  // Same from a unique id every rank already has (rank 0 made it with ncclGetUniqueId), with `control`
  // (any host transport over the same ranks) as the control channel. Collective over those ranks.
  static Status create(const ncclUniqueId& id, std::unique_ptr<Transport> control, cudaStream_t stream,
                       std::chrono::milliseconds timeout, std::unique_ptr<Transport>* out);
  ~NcclTransport() override;
  const char* name() const override { return "nccl"; }
  // Each slice costs an NCCL group launch (tens of microseconds on the host for a non-blocking
  // communicator) and a few kernels: small slices leave the link idle (docs/PERFORMANCE.md, NCCL sweep).
  size_t defaultSliceBytes() const override { return size_t(64) << 20; }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doFlush() override;
  Status doProgress() override;
  void doAbort() override;
  Status doSendControl(int peer, ControlTag tag, const void* data, size_t bytes) override {
    return control_->sendControl(peer, tag, data, bytes);
  }
  Status doProbeControl(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from,
                        bool* got) override {
    return control_->probeControl(peer, tag, message, from, got);
  }

 private:
  NcclTransport(std::unique_ptr<Transport> control, ncclComm_t comm, cudaStream_t compute,
                cudaStream_t stream, cudaEvent_t computeMark, std::chrono::milliseconds timeout);
  Status openGroup();
  Status asyncError(const char* what);
  void closeComm();  // finalize + destroy, or abort when that does not finish in time

  std::unique_ptr<Transport> control_;
  ncclComm_t comm_;
  const cudaStream_t compute_;  // the executor's stream
  const cudaStream_t stream_;   // ours: NCCL's kernels
  cudaEvent_t computeMark_;     // re-recorded on compute_ at each launch
  std::chrono::milliseconds timeout_;
  bool groupOpen_ = false;
  std::shared_ptr<void> groupEvent_;  // the open group's event (a cudaEvent_t), recorded at its launch
  uint64_t flushes_ = 0;              // ops posted before flush number n are enqueued once flushes_ >= n
  bool aborted_ = false;

  friend class NcclOp;
};

}  // namespace ringguard
