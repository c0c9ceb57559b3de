// The offset from the kernels' %globaltimer to the host's steady clock (trace::nowNs), for the timeline's
// spans of the path's calls (core/call_clock.h): a one-thread kernel stores the timer into mapped pinned
// memory and the host, spinning on that word, reads its own clock the moment the store lands. The smallest of
// a few tries is kept (the host's clock is read at most a PCIe write's latency late, about a microsecond).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>

#include "core/trace_events.h"
#include "cuda/cuda_check.h"
#include "cuda/peer/kernel_preload.h"
#include "cuda/peer/peer_collectives.h"
#include "cuda/peer/peer_launch.h"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernel's bounds from this file.
constexpr int kClockThreads = 32;

__global__ void __launch_bounds__(kClockThreads, 1) globalTimerKernel(volatile uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *out = t == 0 ? 1 : t;  // 0 is "not yet" to the host
  __threadfence_system();
}

}  // namespace

namespace {

// The pinned word the kernel writes and the stream it runs on, released on every exit.
struct TimerProbe {
  uint64_t* word = nullptr;
  uint64_t* deviceWord = nullptr;
  cudaStream_t stream = nullptr;
  ~TimerProbe() {
    if (stream != nullptr) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    }
    if (word != nullptr) (void)cudaFreeHost(word);
  }
};

}  // namespace

Status measureClockOffset(int64_t* offsetNs) {
  constexpr int kTries = 5;
  TimerProbe p;
  if (cudaHostAlloc(reinterpret_cast<void**>(&p.word), sizeof(uint64_t), cudaHostAllocMapped) !=
          cudaSuccess ||
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&p.deviceWord), p.word, 0) != cudaSuccess ||
      cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking) != cudaSuccess) {
    return Status(StatusCode::kInternal, "peer clock offset: no mapped pinned word or stream");
  }
  volatile uint64_t* seen = p.word;
  bool any = false;
  for (int i = 0; i < kTries; ++i) {
    *seen = 0;
    globalTimerKernel<<<1, kClockThreads, 0, p.stream>>>(p.deviceWord);
    if (cudaGetLastError() != cudaSuccess)
      return Status(StatusCode::kInternal, "peer clock offset: launch failed");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    uint64_t gpu = 0;
    while ((gpu = *seen) == 0 && std::chrono::steady_clock::now() < deadline) {
    }
    const uint64_t host = trace::nowNs();
    if (gpu == 0) break;  // the device did not answer within a second: keep what the earlier tries found
    const int64_t offset = int64_t(host) - int64_t(gpu);
    if (!any || offset < *offsetNs) *offsetNs = offset;
    any = true;
  }
  return any ? Status::ok() : Status(StatusCode::kTimeout, "peer clock offset: the timer kernel did not run");
}

Status preloadPeerClock() { return preloadKernel(globalTimerKernel); }

}  // namespace peer
}  // namespace ringguard
