// The stream a collective of CUDA tensors runs on (docs/TORCH.md, "Streams"). With
// RINGGUARD_CUDA_COLLECTIVE_STREAM=own (the default) it is a stream of the group's own, made to wait for the
// caller's current stream when the call is made; the Work's Future records its completion on that stream,
// and Work.wait() or the Future makes the caller's current stream wait for it (C10dWork::synchronize). What
// the caller enqueues in between runs beside the collective, as with ProcessGroupNCCL: DDP's backward goes
// on while a bucket's all-reduce waits for the other ranks, instead of queuing behind it. With caller, the
// collective runs on the caller's current stream, in line with everything on it.
//
// The peer windows' kernels of one communicator still run in the order the host issued them, whatever the
// streams (runtime/device/stream_chain.h); a CUDA graph capture takes the own stream in through the event
// (fork) and back at the wait (join), as it takes NCCL's.
#include <mutex>
#include <optional>

#include "ringguard/torch/process_group.h"
#if RINGGUARD_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ringguard {

struct ProcessGroupRingguard::OwnStream {
#if RINGGUARD_TORCH_CUDA
  std::mutex mutex;  // a group's collectives may be issued from several threads (autograd's, the caller's)
  int device = -1;
  std::optional<c10::cuda::CUDAStream> stream;
  at::cuda::CUDAEvent fork;  // recorded on a caller's stream, waited for by `stream`
#endif
};

void* ProcessGroupRingguard::collectiveStream(int device) {
#if RINGGUARD_TORCH_CUDA
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(device));
  if (!ownCudaStream_) return caller.stream();
  std::shared_ptr<OwnStream> own;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ownStream_) ownStream_ = std::make_shared<OwnStream>();
    own = ownStream_;
  }
  std::lock_guard<std::mutex> lock(own->mutex);
  // The group's CUDA communicator has one device (communicatorFor checked it before this is called).
  if (!own->stream || own->device != device) {
    own->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, c10::DeviceIndex(device));
    own->device = device;
  }
  own->fork.record(caller);
  own->fork.block(*own->stream);
  return own->stream->stream();
#else
  (void)device;
  return nullptr;
#endif
}

void ProcessGroupRingguard::usedOnStream(const std::vector<at::Tensor>& tensors, void* stream, int device) {
#if RINGGUARD_TORCH_CUDA
  if (device < 0 || stream == c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(device)).stream()) return;
  const c10::cuda::CUDAStream on =
      c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), c10::DeviceIndex(device));
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.is_cuda() && t.has_storage()) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), on);
    }
  }
#else
  (void)tensors, (void)stream, (void)device;
#endif
}

}  // namespace ringguard
