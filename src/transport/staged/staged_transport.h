#pragma once
// Device memory staged through pinned host memory over any host transport (MPI now; c10d Gloo later):
// device -> pinned (cudaMemcpyAsync on the communication stream, so it follows the kernel that produced
// the data) -> host transport -> pinned -> device. It serves where NCCL is missing, and lets several ranks
// share one GPU (NCCL refuses two ranks on one device).
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuda/memory_pool.h"
#include "transport/transport.h"

namespace ringguard {

class StagedTransport final : public Transport {
 public:
  // `stream` is the communication stream the executor enqueues on; `pinned` serves the staging buffers.
  StagedTransport(std::unique_ptr<Transport> host, PinnedHostPool* pinned, cudaStream_t stream);
  ~StagedTransport() override;
  const char* name() const override { return "staged"; }
  ControlChannel* control() override { return host_->control(); }  // the host transport's
  // Each slice makes three hops (D2H, host transport, H2D) driven by one progress thread: deeper and
  // larger than the host default, or the pipeline idles: with the host's 1 MiB x 2 slots it lost to copy +
  // MPI_Allreduce + copy at 4 ranks (docs/PERFORMANCE.md, "Fifth session").
  size_t defaultSliceBytes() const override { return size_t(4) << 20; }
  int defaultSlots() const override { return 4; }

  class Op;  // a staged send or receive; public so its implementation can reach the transport

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doProgress() override;
  void doAbort() override { host_->markBroken(); }
  void doLeave() override { host_->leave(); }
  void doNotePeerStalled(const std::string& why) override { host_->notePeerStalled(why); }

 private:
  friend class Op;
  std::unique_ptr<Transport> host_;
  PinnedHostPool* pinned_;
  cudaStream_t stream_;
  std::vector<Op*> live_;  // ops still moving data; advanced by doProgress
};

}  // namespace ringguard
