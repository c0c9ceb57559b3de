#pragma once
// Device memory over ncclSend/ncclRecv on the communication stream. The communicator is non-blocking
// (config.blocking = 0): every call returns at once, and the waits of the algorithm poll
// ncclCommGetAsyncError, so a timeout can abort it (ncclCommAbort) instead of hanging. Sends and receives
// posted between two flushes form one NCCL group. The control channel is a host transport (MPI, or c10d).
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
  // device must be the one this rank uses. Fails with kTimeout if the communicator is not ready in time.
  static Status create(MPI_Comm comm, cudaStream_t stream, std::chrono::milliseconds timeout,
                       std::unique_ptr<Transport>* out);
  // Same from a unique id every rank already has (rank 0 made it with ncclGetUniqueId), with `control`
  // (any host transport over the same ranks) as the control channel. Collective over those ranks.
  static Status create(const ncclUniqueId& id, std::unique_ptr<Transport> control, cudaStream_t stream,
                       std::chrono::milliseconds timeout, std::unique_ptr<Transport>* out);
  ~NcclTransport() override;
  const char* name() const override { return "nccl"; }

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
  NcclTransport(std::unique_ptr<Transport> control, ncclComm_t comm, cudaStream_t stream,
                std::chrono::milliseconds timeout);
  Status openGroup();
  Status asyncError(const char* what);

  std::unique_ptr<Transport> control_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  std::chrono::milliseconds timeout_;
  bool groupOpen_ = false;
  uint64_t flushes_ = 0;  // ops posted before flush number n are enqueued once flushes_ >= n
  bool aborted_ = false;

  friend class NcclOp;
};

}  // namespace ringguard
