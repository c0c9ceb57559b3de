#pragma once
// The guard's view of tensor memory: a named, typed byte range in host or device memory, and the backend
// that snapshots, restores and scans it. The state machine (guard.h) is written against GuardBackend only,
// so the same logic runs over host memory in the unit tests and over device memory through the CUDA
// backend (ringguard/guard/device_backend.h). Framework-free: no torch, no CUDA types here.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringguard/core/non_finite.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

// One declared tensor of a guarded op. `data` is a host pointer or a device pointer (per `kind`); `bytes`
// must be a multiple of the element size. The guard never owns the memory.
struct GuardBuffer {
  std::string name;
  void* data = nullptr;
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  MemoryKind kind = MemoryKind::kHost;

  size_t count() const { return bytes / dataTypeSize(dtype); }
};

// Non-finite elements of one scanned buffer.
// NaN, +Inf and -Inf elements, and the index of the first (core/non_finite.h).
using ScanResult = NonFiniteCount;

// What the guard's fault injection writes. kLargeFinite is the dtype's largest finite value: a wrong
// finite value that the scan cannot see, injected to show exactly that (docs/GUARD.md).
enum class FaultValue : uint8_t { kNaN = 0, kPosInf, kNegInf, kLargeFinite };
const char* faultValueName(FaultValue v);  // "nan", "+inf", "-inf", "large"
bool parseFaultValue(const std::string& s, FaultValue* out);

// zero: every non-finite element becomes 0. clamp: NaN -> 0, +Inf -> the largest finite value, -Inf -> the
// lowest. Integer buffers have no non-finite values and are left alone.
enum class SanitizeMode : uint8_t { kZero = 0, kClamp };

// Snapshot storage the backend owns; released with GuardBackend::release.
struct SnapshotHandle {
  void* data = nullptr;
  size_t bytes = 0;
};

// Memory operations of one memory kind. `stream` is opaque here: the CUDA backend's cudaStream_t (nullptr
// is the legacy default stream), ignored by the host backend. Every call is ordered after the work already
// enqueued on `stream`; only readScans and readElement wait for the device.
class GuardBackend {
 public:
  virtual ~GuardBackend() = default;

  virtual MemoryKind kind() const = 0;
  // Copies `buffer` into storage of the backend's own (device: from the pool, on a side stream ordered by
  // events with `stream`; no device synchronisation). The op may write `buffer` once this returns, provided
  // it runs on `stream`.
  virtual Status snapshot(const GuardBuffer& buffer, void* stream, SnapshotHandle* out) = 0;
  // snapshot() of each buffer, in order, into out[i]. The device backend batches them: one event pair and one
  // cudaMemcpyBatchAsync for all (instead of two events and a copy each). On failure every snapshot already
  // taken is in `out` (the caller releases them).
  virtual Status snapshotMany(const std::vector<const GuardBuffer*>& buffers, void* stream,
                              std::vector<SnapshotHandle>* out) {
    out->clear();
    for (const GuardBuffer* b : buffers) {
      SnapshotHandle h;
      const Status st = snapshot(*b, stream, &h);
      if (!st.isOk()) return st;
      out->push_back(h);
    }
    return Status::ok();
  }
  // Copies a snapshot back over `buffer`, ordered on `stream`.
  virtual Status restore(const GuardBuffer& buffer, const SnapshotHandle& saved, void* stream) = 0;
  virtual Status release(const SnapshotHandle& saved, void* stream) = 0;
  // Appends a scan of `buffer` to the pending batch. Integer buffers scan clean.
  virtual Status scan(const GuardBuffer& buffer, void* stream) = 0;
  // Appends scans of every buffer, in order, as scan() on each would. The device backend launches them
  // together (nanScanManyDevice: two launches per 64 buffers of a dtype instead of two per buffer).
  virtual Status scanMany(const std::vector<const GuardBuffer*>& buffers, void* stream) {
    for (const GuardBuffer* b : buffers) RINGGUARD_RETURN_IF_ERROR(scan(*b, stream));
    return Status::ok();
  }
  // Waits until every pending scan has run and returns their results in the order of the scan() calls,
  // then empties the batch. The device backend's one host wait: an event on `stream` and a summary word in
  // mapped pinned memory; the per-buffer results are copied back only when the summary is not clean.
  virtual Status readScans(void* stream, std::vector<ScanResult>* results) = 0;
  // Summarises the pending scans into `*flag` (an f32 in this backend's memory: host or device) without any
  // host wait, then empties the batch: 1.0f when some scan found a non-finite value, else 0.0f (written
  // in both cases, ordered on `stream`). The device verdict of Guard::runStepToFlag: the flag gates the
  // state update on the device (a fused optimizer's found_inf), so the host never needs the result.
  virtual Status verdictFlag(void* stream, float* flag) = 0;
  // Replaces non-finite elements in place (zero / clamp policies).
  virtual Status sanitize(const GuardBuffer& buffer, SanitizeMode mode, void* stream) = 0;
  // Writes `value` into element `index` (fault injection; index < buffer.count()).
  virtual Status inject(const GuardBuffer& buffer, size_t index, FaultValue value, void* stream) = 0;
  // Reads element `index` as a double, synchronously: the error message's "first bad value" (rare path).
  virtual Status readElement(const GuardBuffer& buffer, size_t index, void* stream, double* value) = 0;
  // CRC-32 of the buffer's bytes, synchronously: the debug check that an op did not write a declared input.
  virtual Status checksum(const GuardBuffer& buffer, void* stream, uint32_t* crc) = 0;
  // Host waits this backend has made (readScans, readElement, checksum): deferred mode's "zero host syncs
  // inside the step" is counted with this.
  virtual uint64_t hostWaits() const = 0;
};

// The host implementation: snapshots are heap copies (memcpy), scans run inline.
std::unique_ptr<GuardBackend> makeHostGuardBackend();

}  // namespace ringguard
