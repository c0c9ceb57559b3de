#include "torch/rejection.h"

#include <mutex>

#include "ringguard/torch/process_group.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace ringguard {

namespace {
thread_local int overrideDepth = 0;
thread_local bool overrideStarted = false;
}  // namespace

RejectionScope::RejectionScope() {
  if (overrideDepth++ == 0) overrideStarted = false;
}

RejectionScope::~RejectionScope() { --overrideDepth; }

void markCollectiveStarted() { overrideStarted = true; }

void ProcessGroupRingguard::rejected(CollectiveKind kind, const at::Tensor& t, RejectedSize what) {
  // In the handler the override's scope has ended: depth 0 means no override of this thread is still
  // running, so this one was the outermost.
  if (overrideDepth == 0 && !overrideStarted) {
    try {
      releaseHeldP2p();  // as a collective's launch() would have
      const bool cuda = t.defined() && t.is_cuda();
      // The staged variants of CUDA all-reduces and all-gathers run on the CPU communicator.
      const bool staged = cuda && ((kind == CollectiveKind::kAllreduce && stagedSelected("all_reduce", t)) ||
                                   (kind == CollectiveKind::kAllgather && stagedSelected("all_gather", t)));
      Communicator* comm = nullptr;
      void* stream = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!stopped_) comm = cuda && !staged ? cuda_.get() : cpu_.get();
      }
#if RINGGUARD_TORCH_CUDA
      if (cuda && !staged) stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
      // What the call would have published (Communicator::rejectedAsync no longer routes by it: every call
      // of a kind the peer windows carry enters their order at any size).
      size_t bytes = Communicator::kUnknownBytes;
      if (t.defined() && what != RejectedSize::kUnknown) {
        bytes = size_t(t.numel()) * t.element_size();
        if (what == RejectedSize::kGatheredOutput) bytes /= size_t(size_);
        if (what == RejectedSize::kScatteredOutput) bytes *= size_t(size_);
      }
      if (comm != nullptr) comm->rejectedAsync(kind, stream, bytes);
    } catch (...) {
      // The caller gets the rejection's own error.
    }
  }
  throw;
}

}  // namespace ringguard
