#include "runtime/device/stream_chain.h"

#include <string>

namespace ringguard {
namespace cuda {
namespace {

Status cudaFailure(const char* what, cudaError_t e) {
  return Status(StatusCode::kInternal, std::string("peer path: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

StreamChain::~StreamChain() {
  if (last_ != nullptr) cudaEventDestroy(last_);
}

Status StreamChain::run(cudaStream_t stream, FunctionRef<Status()> launch) {
  std::lock_guard<std::mutex> lock(mutex_);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  // A query that fails (another thread capturing in global mode, say) is left to the launch to report.
  const bool capturing =
      cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone;
  if (capturing) {
    cudaGetLastError();  // the failed query's error is not the launch's
    return launch();
  }
  // The wait is skipped only for the same created stream: the default stream's handles (0, legacy,
  // per-thread) may name a different stream on each thread (per-thread default streams), so they always wait.
  const bool defaultStream = stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
  if (recorded_ && (stream != lastStream_ || defaultStream)) {
    const cudaError_t e = cudaStreamWaitEvent(stream, last_, 0);
    if (e != cudaSuccess) return cudaFailure("ordering after the previous launch (cudaStreamWaitEvent)", e);
  }
  RINGGUARD_RETURN_IF_ERROR(launch());
  if (last_ == nullptr) {
    const cudaError_t e = cudaEventCreateWithFlags(&last_, cudaEventDisableTiming);
    if (e != cudaSuccess) return cudaFailure("cudaEventCreateWithFlags", e);
  }
  const cudaError_t e = cudaEventRecord(last_, stream);
  if (e != cudaSuccess) return cudaFailure("recording the launch (cudaEventRecord)", e);
  lastStream_ = stream;
  recorded_ = true;
  return Status::ok();
}

}  // namespace cuda
}  // namespace ringguard
