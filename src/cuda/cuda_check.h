#pragma once
// Private to the CUDA layer: turns CUDA runtime errors into ringguard::Status carrying the failing call and
// file:line, so that every CUDA call in the layer is checked and no error is silently dropped, plus the
// per-device launch-size cache the persistent kernels share (capped by RINGGUARD_KERNEL_SMS).
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <utility>

#include "core/env.h"
#include "ringguard/core/options.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace cuda_detail {

// "cudaErrorMemoryAllocation (out of memory) in cudaMallocFromPoolAsync(...) at src/cuda/x.cc:42".
inline Status cudaErrorStatus(cudaError_t err, const char* expr, const char* file, int line) {
  std::string msg = cudaGetErrorName(err);
  msg += " (";
  msg += cudaGetErrorString(err);
  msg += ") in ";
  msg += expr;
  msg += " at ";
  msg += file;
  msg += ":";
  msg += std::to_string(line);
  return Status(StatusCode::kInternal, std::move(msg));
}

}  // namespace cuda_detail
}  // namespace ringguard

// Evaluates a CUDA runtime call once; on failure returns a kInternal Status from the enclosing function.
#define RINGGUARD_CUDA_CHECK(expr)                                                               \
  do {                                                                                           \
    const cudaError_t _rg_cuda_err = (expr);                                                     \
    if (_rg_cuda_err != cudaSuccess) {                                                           \
      return ::ringguard::cuda_detail::cudaErrorStatus(_rg_cuda_err, #expr, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)

// After a <<<...>>> launch: reports launch-configuration errors (bad grid, too much shared memory) at the
// launch site instead of at the next unrelated call.
#define RINGGUARD_CUDA_CHECK_LAUNCH() RINGGUARD_CUDA_CHECK(cudaGetLastError())

namespace ringguard {
namespace cuda_detail {

// RINGGUARD_KERNEL_SMS, read once per process: how many SMs' worth of resident blocks the streaming kernels
// (CRC, verify + reduce, NaN scan) may use; 0 means the whole device. `status` reports a bad value.
struct KernelSmLimit {
  int sms = 0;
  Status status;
};
inline const KernelSmLimit& kernelSmLimit() {
  static const KernelSmLimit parsed = [] {
    int sms = 0;
    const char* v = envLookup("RINGGUARD_KERNEL_SMS");
    Status status = v != nullptr ? parseKernelSms(v, &sms) : Status::ok();  // no assignment: nvcc warns
    return KernelSmLimit{sms, std::move(status)};                           // on a discarded Status&
  }();
  return parsed;
}

// How many blocks of one kernel fit on the current device at once (SM count x occupancy), cached per
// device because the occupancy query costs microseconds and the launchers run on every collective.
// Persistent kernels size their grids with it.
class ResidentBlocks {
 public:
  // `prepare(device)` runs once per device before the query, e.g. to raise the kernel's dynamic shared
  // memory limit with cudaFuncSetAttribute, which is a per-device setting too.
  template <typename Kernel, typename Prepare>
  Status get(Kernel kernel, int threads, size_t dynamicSmem, Prepare prepare, int* blocks) {
    int device = 0;
    RINGGUARD_CUDA_CHECK(cudaGetDevice(&device));
    if (device < 0 || device >= kMaxDevices) {
      return Status(StatusCode::kInternal, "device ordinal out of range: " + std::to_string(device));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (blocks_[device] == 0) {
      RINGGUARD_RETURN_IF_ERROR(prepare(device));
      int sms = 0;
      int perSm = 0;
      RINGGUARD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      RINGGUARD_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, dynamicSmem));
      if (sms <= 0 || perSm <= 0) {
        return Status(StatusCode::kInternal, "kernel cannot be resident on device " + std::to_string(device) +
                                                 " (SMs " + std::to_string(sms) + ", blocks per SM " +
                                                 std::to_string(perSm) + ")");
      }
      const KernelSmLimit& limit = kernelSmLimit();
      RINGGUARD_RETURN_IF_ERROR(limit.status);
      blocks_[device] = (limit.sms > 0 && limit.sms < sms ? limit.sms : sms) * perSm;
    }
    *blocks = blocks_[device];
    return Status::ok();
  }

 private:
  static constexpr int kMaxDevices = 64;
  std::mutex mu_;
  int blocks_[kMaxDevices] = {};  // 0: not queried yet on that device
};

// Makes `device` current on the calling thread for the lifetime of the guard, and restores the previous
// device afterwards; never throws (it runs in deleters and destructors too), error() says whether
// it worked. The check is one cudaGetDevice when the device is already current (the usual case).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    int current = 0;
    err_ = cudaGetDevice(&current);
    if (err_ == cudaSuccess && current != device) {
      err_ = cudaSetDevice(device);
      if (err_ == cudaSuccess) {
        previous_ = current;
        switched_ = true;
      }
    }
  }
  ~DeviceGuard() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t error() const { return err_; }

 private:
  cudaError_t err_ = cudaSuccess;
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace cuda_detail
}  // namespace ringguard
