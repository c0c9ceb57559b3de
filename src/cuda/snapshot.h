#pragma once
// The launchers of src/cuda/guard_scan.cu: the kernels of the guard's device side, in the CUDA layer's own
// types (the guard's backend over device memory, src/guard/device/, adapts its types to these). CUDA-free,
// like kernels.h, so plain C++ callers need no CUDA header. Launchers are asynchronous on `stream` (see
// kernels.h).
#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

// What an injection writes into an element (the order of element_bits::faultBits, which the kernel uses).
enum class InjectedValue : uint8_t { kNaN = 0, kPosInf, kNegInf, kLargestFinite };

// The summary of a batch of scans, written by the device into mapped pinned host memory: the host reads
// these 24 bytes after one event, and copies the per-buffer results back only when badScans != 0.
struct GuardVerdict {
  unsigned long long badScans;      // scans that found a non-finite element
  unsigned long long firstBadScan;  // lowest index (within the batch) of such a scan, UINT64_MAX if none
  unsigned long long badElements;   // non-finite elements over the whole batch
};

// Summarises `count` NanScanResults at `resultsDevice` (scans base .. base + count - 1 of the batch) into
// `*verdict`, a device-visible pointer (mapped pinned memory or device memory). accumulate == false starts
// a new summary; true adds to the one a previous launch on the same stream wrote (batches of several
// chunks). One block: a batch holds at most a few thousand scans.
Status guardVerdictDevice(const NanScanResult* resultsDevice, size_t count, uint64_t base, bool accumulate,
                          GuardVerdict* verdict, cudaStream_t stream);

// Writes 1.0f into the device float `*flag` when `*verdict` (device-visible) counts a bad scan, else 0.0f:
// the device-side verdict of a step (a fused optimizer's found_inf reads it), with no host wait.
Status guardVerdictFlagDevice(const GuardVerdict* verdict, float* flag, cudaStream_t stream);

// Replaces the non-finite elements of `count` elements at `data` in place: with 0 (clamp == false), or
// NaN -> 0 and +-Inf -> the dtype's largest / lowest finite value (clamp == true). Bit-identical to the
// host backend. Float dtypes only (others: kInvalidArgument).
Status guardSanitizeDevice(void* data, size_t count, DataType dtype, bool clamp, cudaStream_t stream);

// Writes `value` (quiet NaN, +Inf, -Inf or the largest finite value) into element `index` at `data`: the
// guard's fault injection. Float dtypes only.
Status guardInjectDevice(void* data, size_t index, DataType dtype, InjectedValue value, cudaStream_t stream);
// The same, decided on the device: only when bit *attemptDevice (the graph path's replay counter: 0 for the
// first run) of `attemptMask` is set.
Status guardInjectOnAttemptsDevice(void* data, size_t index, DataType dtype, InjectedValue value,
                                   const unsigned* attemptDevice, uint32_t attemptMask, cudaStream_t stream);

// The graph path's replay decision (GraphGuard, inside a captured graph): sets the WHILE node's condition
// (`conditionalHandle`, a cudaGraphConditionalHandle) to 1 and counts a replay in *replays when *verdict
// (device-visible) counts a bad scan and fewer than maxReplays replays ran, else sets it to 0.
Status guardReplayDecisionDevice(uint64_t conditionalHandle, const GuardVerdict* verdict, unsigned* replays,
                                 unsigned maxReplays, cudaStream_t stream);

}  // namespace ringguard
