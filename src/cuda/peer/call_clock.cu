// The timeline's clocks of the peer path's calls (core/call_clock.h), in one-thread kernels of their own on
// the call's stream, so that the collectives' kernels are the same whether the timeline is on or off (clocks
// in the collectives' own last block cost a one-shot 0.2-0.5 us a call with the timeline off: docs/GPU.md,
// "Timeline spans of the path's calls"). The begin kernel stores %globaltimer in this rank's window; the end
// kernel, after the call's kernels, writes the call's ring entry. And the offset from %globaltimer to the
// host's steady clock (trace::nowNs): a one-thread kernel stores the timer into mapped pinned memory and the
// host, spinning on that word, reads its own clock the moment the store lands; the smallest of a few tries is
// kept (the host's clock is read at most a PCIe write's latency late, about a microsecond).
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

__device__ __forceinline__ uint64_t timerNow() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kClockThreads, 1) globalTimerKernel(volatile uint64_t* out) {
  if (threadIdx.x != 0) return;
  const uint64_t t = timerNow();
  *out = t == 0 ? 1 : t;  // 0 is "not yet" to the host
  __threadfence_system();
}

__device__ __forceinline__ volatile uint64_t* callStartWord(void* window) {
  return reinterpret_cast<volatile uint64_t*>(static_cast<char*>(window) + kCountersOffset) + kCallStartWord;
}

__global__ void __launch_bounds__(kClockThreads, 1) callClockBeginKernel(void* window) {
  if (threadIdx.x == 0) *callStartWord(window) = timerNow();
}

// The entry of the epoch the call left in the window's seq word (its kernels ran before this one, in stream
// order): the epoch zeroed first and written last, each behind a system fence, so the host never takes two
// calls' fields for one (core/call_clock.cc).
__global__ void __launch_bounds__(kClockThreads, 1)
    callClockEndKernel(void* window, CallClock* ring, uint32_t fingerprint, uint32_t dtype, uint64_t count) {
  if (threadIdx.x != 0) return;
  const uint64_t end = timerNow();
  const uint64_t epoch = *reinterpret_cast<volatile uint64_t*>(static_cast<char*>(window) + kSeqOffset);
  volatile CallClock* c = ring + callClockSlot(epoch);
  c->epoch = 0;
  __threadfence_system();
  c->startNs = *callStartWord(window);
  c->endNs = end;
  c->fingerprint = fingerprint;
  c->dtype = dtype;
  c->count = count;
  __threadfence_system();
  c->epoch = epoch;
}

}  // namespace

Status launchCallClockBegin(void* ownWindow, void* stream) {
  if (ownWindow == nullptr) return Status(StatusCode::kInvalidArgument, "peer call clock: no window");
  callClockBeginKernel<<<1, kClockThreads, 0, static_cast<cudaStream_t>(stream)>>>(ownWindow);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status launchCallClockEnd(void* ownWindow, CallClock* ring, const PeerWindowArgs& call, void* stream) {
  if (ownWindow == nullptr || ring == nullptr) {
    return Status(StatusCode::kInvalidArgument, "peer call clock: no window or ring");
  }
  const uint64_t count = uint64_t(call.fingerprint[3]) | uint64_t(call.fingerprint[4]) << 32;
  callClockEndKernel<<<1, kClockThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      ownWindow, ring, call.fingerprint[0], call.fingerprint[1], count);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

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

Status preloadPeerClock() {
  RINGGUARD_RETURN_IF_ERROR(preloadKernel(globalTimerKernel));
  RINGGUARD_RETURN_IF_ERROR(preloadKernel(callClockBeginKernel));
  return preloadKernel(callClockEndKernel);
}

}  // namespace peer
}  // namespace ringguard
