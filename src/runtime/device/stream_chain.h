#pragma once
// Orders the kernels of one direct path that callers launch on different streams (docs/design/protocol.md,
// "One collective": launches in issue order). A peer-window kernel takes its epoch from the window's
// sequence word when it runs, so two kernels of one communicator running at once (an all_reduce under
// `torch.cuda.stream(s1)` beside one on the default stream, autograd hooks on two streams) would take the
// same epoch and publish into the same chunk table: wrong bits, or a deadline. NCCL orders a communicator's
// launches across user streams; this does the same: every launch records an event, and a launch on another
// stream than the last one first waits for it, so the kernels run in the order the host issued them (which
// is the same on every rank). On one created stream, stream order already does it and the wait is skipped
// (a default stream's handle may be a different stream on another thread: those always wait).
//
// Inside a CUDA graph capture nothing is waited for or recorded: a graph's kernels are ordered by the graph
// and by the stream it is launched on, and a graph replayed on one stream while eager calls of the same
// communicator run on another is the caller's to order, as it is with NCCL.
#include <cuda_runtime_api.h>

#include <mutex>

#include "core/function_ref.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace cuda {

class StreamChain {
 public:
  StreamChain() = default;
  ~StreamChain();
  StreamChain(const StreamChain&) = delete;
  StreamChain& operator=(const StreamChain&) = delete;

  // Runs `launch` (which enqueues a collective's kernels on `stream`) after every kernel launched through
  // this chain before, on any stream. Serialised: the whole launch holds the chain's lock.
  Status run(cudaStream_t stream, FunctionRef<Status()> launch);

 private:
  std::mutex mutex_;
  cudaEvent_t last_ = nullptr;  // recorded after the last launch outside a capture
  cudaStream_t lastStream_ = nullptr;
  bool recorded_ = false;
};

}  // namespace cuda
}  // namespace ringguard
