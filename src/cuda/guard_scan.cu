// The guard's small kernels next to the NaN scan: the verdict summary of a batch of scans (the one word
// the host waits for), and the rare-path sanitize (zero / clamp) and fault-injection writes. The scan
// itself is nanScanDevice (nan_scan.cu), reused unchanged, one result slot per scanned buffer.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/element_bits.h"
#include "cuda/cuda_check.h"
#include "cuda/snapshot.h"

namespace ringguard {
namespace {

constexpr int kVerdictThreads = 256;
constexpr int kSanitizeThreads = 256;
constexpr int kSanitizeMinBlocks = 4;
constexpr int kInjectThreads = 32;

using element_bits::FloatBits;

__global__ void __launch_bounds__(kVerdictThreads, 1)
    guardVerdictKernel(const NanScanResult* __restrict__ results, unsigned long long count,
                       unsigned long long base, int accumulate, GuardVerdict* verdict) {
  unsigned long long badScans = 0, badElements = 0, first = ~0ull;
  for (unsigned long long i = threadIdx.x; i < count; i += kVerdictThreads) {
    const unsigned long long c = results[i].count;
    if (c != 0) {
      ++badScans;
      badElements += c;
      first = min(first, base + i);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    badScans += __shfl_xor_sync(0xffffffffu, badScans, offset);
    badElements += __shfl_xor_sync(0xffffffffu, badElements, offset);
    first = min(first, __shfl_xor_sync(0xffffffffu, first, offset));
  }
  __shared__ unsigned long long warpScans[kVerdictThreads / 32], warpElements[kVerdictThreads / 32],
      warpFirst[kVerdictThreads / 32];
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31u) == 0) {
    warpScans[warp] = badScans;
    warpElements[warp] = badElements;
    warpFirst[warp] = first;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kVerdictThreads / 32; ++w) {
      badScans += warpScans[w];
      badElements += warpElements[w];
      first = min(first, warpFirst[w]);
    }
    // Plain stores to mapped host memory; the host reads them after the event that follows this kernel.
    volatile GuardVerdict* v = verdict;
    if (accumulate) {
      badScans += v->badScans;
      badElements += v->badElements;
      first = min(first, static_cast<unsigned long long>(v->firstBadScan));
    }
    v->badScans = badScans;
    v->badElements = badElements;
    v->firstBadScan = first;
    __threadfence_system();
  }
}

__global__ void __launch_bounds__(kInjectThreads, 1)
    guardFlagKernel(const GuardVerdict* verdict, float* flag) {
  if (threadIdx.x == 0) *flag = verdict->badScans != 0 ? 1.0f : 0.0f;
}

// Rare path (a last-resort policy after a detection): a scalar grid-stride loop is enough, and keeps the
// kernel free of the vector head/tail logic the streaming kernels need.
template <typename Word>
__global__ void __launch_bounds__(kSanitizeThreads, kSanitizeMinBlocks)
    guardSanitizeKernel(Word* __restrict__ data, unsigned long long count, FloatBits bits, int clamp) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * kSanitizeThreads;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * kSanitizeThreads + threadIdx.x;
       i < count; i += stride) {
    const uint64_t w = data[i];
    if (element_bits::isNonFinite(w, bits))
      data[i] = static_cast<Word>(element_bits::sanitized(w, bits, clamp != 0));
  }
}

// attempt == nullptr: always; else only when bit *attempt of `mask` is set (the graph path's attempts).
template <typename Word>
__global__ void __launch_bounds__(kInjectThreads, 1)
    guardInjectKernel(Word* data, unsigned long long index, FloatBits bits, int value,
                      const unsigned* attempt, unsigned mask) {
  if (threadIdx.x != 0) return;
  if (attempt != nullptr && (*attempt >= 32 || ((mask >> *attempt) & 1u) == 0)) return;
  data[index] = static_cast<Word>(element_bits::faultBits(value, bits));
}

// The graph path's decision after an attempt's verdict: another replay (the WHILE node's condition 1, and
// one more replay counted) while the verdict is bad and fewer than maxReplays ran, else 0.
__global__ void __launch_bounds__(kInjectThreads, 1)
    guardReplayDecisionKernel(cudaGraphConditionalHandle handle, const GuardVerdict* verdict,
                              unsigned* replays, unsigned maxReplays) {
  if (threadIdx.x != 0) return;
  const bool again = verdict->badScans != 0 && *replays < maxReplays;
  if (again) ++*replays;
  cudaGraphSetConditional(handle, again ? 1u : 0u);
}

// Element widths the guard handles (float8: 8 bits, f16/bf16: 16, f32: 32, f64: 64).
template __global__ void guardSanitizeKernel<uint8_t>(uint8_t*, unsigned long long, FloatBits, int);
template __global__ void guardSanitizeKernel<uint16_t>(uint16_t*, unsigned long long, FloatBits, int);
template __global__ void guardSanitizeKernel<uint32_t>(uint32_t*, unsigned long long, FloatBits, int);
template __global__ void guardSanitizeKernel<unsigned long long>(unsigned long long*, unsigned long long,
                                                                 FloatBits, int);
template __global__ void guardInjectKernel<uint8_t>(uint8_t*, unsigned long long, FloatBits, int,
                                                    const unsigned*, unsigned);
template __global__ void guardInjectKernel<uint16_t>(uint16_t*, unsigned long long, FloatBits, int,
                                                     const unsigned*, unsigned);
template __global__ void guardInjectKernel<uint32_t>(uint32_t*, unsigned long long, FloatBits, int,
                                                     const unsigned*, unsigned);
template __global__ void guardInjectKernel<unsigned long long>(unsigned long long*, unsigned long long,
                                                               FloatBits, int, const unsigned*, unsigned);

Status floatBitsOf(DataType dtype, const char* who, FloatBits* bits) {
  if (!element_bits::floatBits(dtype, bits)) {
    return Status(StatusCode::kInvalidArgument, std::string(who) + ": unsupported dtype " +
                                                    (isValid(dtype) ? dataTypeName(dtype) : "(invalid)") +
                                                    " (f32, f64, f16, bf16 and the float8 types only)");
  }
  return Status::ok();
}

template <typename Word>
Status launchSanitize(void* data, size_t count, const FloatBits& bits, bool clamp, cudaStream_t stream) {
  static cuda_detail::ResidentBlocks residency;
  int resident = 0;
  RINGGUARD_RETURN_IF_ERROR(residency.get(
      guardSanitizeKernel<Word>, kSanitizeThreads, 0, [](int) { return Status::ok(); }, &resident));
  const size_t wanted = (count + kSanitizeThreads - 1) / kSanitizeThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < static_cast<size_t>(resident) ? wanted : resident);
  guardSanitizeKernel<Word>
      <<<blocks, kSanitizeThreads, 0, stream>>>(static_cast<Word*>(data), count, bits, clamp ? 1 : 0);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace

Status guardVerdictDevice(const NanScanResult* resultsDevice, size_t count, uint64_t base, bool accumulate,
                          GuardVerdict* verdict, cudaStream_t stream) {
  if (verdict == nullptr) return Status(StatusCode::kInvalidArgument, "guardVerdictDevice: null verdict");
  if (resultsDevice == nullptr && count != 0) {
    return Status(StatusCode::kInvalidArgument, "guardVerdictDevice: null results");
  }
  guardVerdictKernel<<<1, kVerdictThreads, 0, stream>>>(resultsDevice, count, base, accumulate ? 1 : 0,
                                                        verdict);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status guardVerdictFlagDevice(const GuardVerdict* verdict, float* flag, cudaStream_t stream) {
  if (verdict == nullptr || flag == nullptr) {
    return Status(StatusCode::kInvalidArgument, "guardVerdictFlagDevice: null verdict or flag");
  }
  guardFlagKernel<<<1, kInjectThreads, 0, stream>>>(verdict, flag);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status guardSanitizeDevice(void* data, size_t count, DataType dtype, bool clamp, cudaStream_t stream) {
  FloatBits bits;
  RINGGUARD_RETURN_IF_ERROR(floatBitsOf(dtype, "guardSanitizeDevice", &bits));
  if (count == 0) return Status::ok();
  if (data == nullptr) return Status(StatusCode::kInvalidArgument, "guardSanitizeDevice: null data");
  switch (bits.width) {
    case 1:
      return launchSanitize<uint8_t>(data, count, bits, clamp, stream);
    case 2:
      return launchSanitize<uint16_t>(data, count, bits, clamp, stream);
    case 4:
      return launchSanitize<uint32_t>(data, count, bits, clamp, stream);
    default:
      return launchSanitize<unsigned long long>(data, count, bits, clamp, stream);
  }
}

Status guardInjectDevice(void* data, size_t index, DataType dtype, InjectedValue value, cudaStream_t stream) {
  return guardInjectOnAttemptsDevice(data, index, dtype, value, nullptr, 0, stream);
}

Status guardInjectOnAttemptsDevice(void* data, size_t index, DataType dtype, InjectedValue value,
                                   const unsigned* attemptDevice, uint32_t attemptMask, cudaStream_t stream) {
  FloatBits bits;
  RINGGUARD_RETURN_IF_ERROR(floatBitsOf(dtype, "guardInjectDevice", &bits));
  if (data == nullptr) return Status(StatusCode::kInvalidArgument, "guardInjectDevice: null data");
  const int v = static_cast<int>(value);
  switch (bits.width) {
    case 1:
      guardInjectKernel<uint8_t><<<1, kInjectThreads, 0, stream>>>(static_cast<uint8_t*>(data), index, bits,
                                                                   v, attemptDevice, attemptMask);
      break;
    case 2:
      guardInjectKernel<uint16_t><<<1, kInjectThreads, 0, stream>>>(static_cast<uint16_t*>(data), index, bits,
                                                                    v, attemptDevice, attemptMask);
      break;
    case 4:
      guardInjectKernel<uint32_t><<<1, kInjectThreads, 0, stream>>>(static_cast<uint32_t*>(data), index, bits,
                                                                    v, attemptDevice, attemptMask);
      break;
    default:
      guardInjectKernel<unsigned long long><<<1, kInjectThreads, 0, stream>>>(
          static_cast<unsigned long long*>(data), index, bits, v, attemptDevice, attemptMask);
      break;
  }
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status guardReplayDecisionDevice(uint64_t conditionalHandle, const GuardVerdict* verdict, unsigned* replays,
                                 unsigned maxReplays, cudaStream_t stream) {
  if (verdict == nullptr || replays == nullptr) {
    return Status(StatusCode::kInvalidArgument, "guardReplayDecisionDevice: null verdict or replay counter");
  }
  guardReplayDecisionKernel<<<1, kInjectThreads, 0, stream>>>(conditionalHandle, verdict, replays,
                                                              maxReplays);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace ringguard
