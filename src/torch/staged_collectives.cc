// The staged_chunked variants of the all_gather and all_reduce families (docs/DOWNGRADE.md): CUDA tensors
// all-gathered or all-reduced chunk by chunk through pinned host memory over the CPU communicator, while the
// process's downgrade engine (ringguard/policy/process_engine.h) selects them. launch() runs the Start these
// make like any other.
#include <mutex>
#include <utility>

#include "ringguard/policy/process_engine.h"
#include "ringguard/runtime/staged_allgather.h"
#include "ringguard/runtime/staged_allreduce.h"
#include "ringguard/torch/process_group.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "ringguard/runtime/device_stager.h"
#endif

namespace ringguard {

// RINGGUARD_NAN_CHECK=skip keeps the ring: a skipped chunk would leave the host result of an earlier chunk
// where the copies back read it, while the ring leaves the output as it was (its documented meaning).
bool ProcessGroupRingguard::stagedSelected(const char* family, const at::Tensor& t) const {
  return t.is_cuda() && options_.nanCheck != NanCheck::kSkip &&
         processPolicyVariant(family) == "staged_chunked";
}

ProcessGroupRingguard::Start ProcessGroupRingguard::stagedStart(int device,
                                                                std::function<Status(HostStager&)> run,
                                                                std::atomic<uint64_t>* done, uint64_t calls) {
  return [this, device, run = std::move(run), done, calls](Communicator*,
                                                           void* stream) -> std::shared_ptr<ringguard::Work> {
#if RINGGUARD_TORCH_CUDA
    std::lock_guard<std::mutex> lock(stagedMutex_);
    c10::cuda::CUDAGuard guard(device);
    Status st;
    if (!stager_) st = cuda::makeDeviceStager(device, &stager_);
    if (st.isOk()) {
      stager_->setStream(stream);
      st = run(*stager_);
    }
    if (st.isOk()) *done += calls;
    return ringguard::Work::completed(std::move(st));
#else
    (void)device, (void)stream, (void)done, (void)calls;
    return ringguard::Work::completed(
        Status(StatusCode::kInvalidArgument, "the staged collectives need a build with CUDA"));
#endif
  };
}

ProcessGroupRingguard::Start ProcessGroupRingguard::stagedAllgatherStart(const at::Tensor& send,
                                                                         const at::Tensor& recv, size_t count,
                                                                         DataType dt) {
  const size_t chunk = size_t(stagedChunkBytes_);
  return stagedStart(
      recv.device().index(),
      [this, send, recv, count, dt, chunk](HostStager& stager) {
        return stagedAllgather(*cpu_, stager, send.data_ptr(), recv.data_ptr(), count, dt, chunk);
      },
      &stagedAllgathers_, 1);
}

ProcessGroupRingguard::Start ProcessGroupRingguard::stagedAllreduceStart(
    const std::vector<at::Tensor>& tensors, const std::vector<DataType>& dts, ReduceOp op) {
  const size_t chunk = size_t(stagedChunkBytes_);
  return stagedStart(
      tensors[0].device().index(),
      [this, tensors, dts, op, chunk](HostStager& stager) {
        for (size_t i = 0; i < tensors.size(); ++i) {
          void* data = tensors[i].data_ptr();
          RINGGUARD_RETURN_IF_ERROR(
              stagedAllreduce(*cpu_, stager, data, data, size_t(tensors[i].numel()), dts[i], op, chunk));
        }
        return Status::ok();
      },
      &stagedAllreduces_, tensors.size());
}

}  // namespace ringguard
