#pragma once
// The device executor: the Executor of collectives on GPU memory (docs/design/protocol.md, "Executors").
// Every step is enqueued on one communication stream, and nothing waits on the host except syncTest()
// (an event query, never blocking), sync(), and the rare path of the growth of the verdict
// array. Per received slice, verifyAndApply() enqueues
//
//   crc32Device(slot payload) -> device word
//   verifyApplyKernel: every block checks the trailer (checkSlice) and only then reduces / copies its share,
//                      block 0 writes the verdict (mapped pinned byte + device word)
//   when forwarded, a reduction: verifyApplyCrcKernel instead, which also checksums dst as it writes it
//                   (-> device word; verifyApplyCrcDevice: two passes where the pointers are not equally
//                   aligned modulo 16);
//   when forwarded, a copy: verifyApplyKernel, then a CRC of dst that runs only after a bad verdict
//                   (verifyCopyCrcDevice: after kOk the outgoing CRC is the verified payload CRC);
//   then sealTrailerKernel writes the outgoing trailer (that CRC, poisoned unless the verdict is kOk)
//
// and for a slice received in place (task.inPlace: the payload is already in dst, the slot holds only its
// trailer) crc32Device(dst), then verifySliceKernel: the verdict and, when forwarded, the outgoing trailer
// (the CRC of dst, poisoned unless kOk); nothing is copied. So the next ncclSend of the trailer needs no
// host decision. Results are bit-identical to HostExecutor. Fault injection (corruptReceived) is a kernel
// on the same stream.
//
// This header is CUDA-free (the stream handle is forward declared as in kernels.h) so that plain C++ can
// include it. Memory comes from the caller's DevicePool and PinnedHostPool only.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/trailer.h"
#include "executor/executor.h"
#include "ringguard/core/status.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace ringguard {

class DevicePool;
class PinnedHostPool;

class DeviceExecutor final : public Executor {
 public:
  // `stream`: the communication stream (created non-blocking by the caller, who owns it and keeps it, the
  // pools and `device` alive for the executor's lifetime). Every call selects `device` on the calling
  // thread while it runs (and restores the previous one). The first form uses pool->device().
  DeviceExecutor(DevicePool* pool, PinnedHostPool* pinned, cudaStream_t stream);
  DeviceExecutor(int device, DevicePool* pool, PinnedHostPool* pinned, cudaStream_t stream);
  // Frees everything (stream-ordered frees of the device memory, a stream synchronisation, then the pinned
  // blocks).
  ~DeviceExecutor() override;

  MemoryKind memory() const override { return MemoryKind::kDevice; }
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  // Grows (never shrinks) the storage and resets it like HostExecutor::prepare: send and slot trailers
  // zeroed (on the stream), verdicts kOk.
  Status prepare(size_t items, int slots, size_t slotBytes) override;
  Trailer* sendTrailer(size_t item) override { return trailers_ + item; }          // device memory
  void* slot(int index) override { return slots_ + size_t(index) * slotStride_; }  // device, 256-B aligned
  Trailer* slotTrailer(int index) override { return slotTrailers_ + index; }       // device memory

  // crc32Device(data) then a one-thread kernel that seals the trailer on the device. `data`: device memory.
  Status sealFirst(size_t item, const void* data, const SliceId& id) override;
  // A one-thread kernel: attempt = `attempt`, trailer CRC recomputed. No host wait.
  Status retag(size_t item, uint16_t attempt) override;
  // corruptDevice on the stream: the plan's kernel lands between the transfer and the verify, no host wait.
  // `payload`: device memory (nullptr: slot `index`'s).
  Status corruptReceived(int index, void* payload, size_t bytes, const CorruptionPlan& plan) override;
  // Enqueues the sequence described above; no host wait. task.dst / task.local: device memory.
  Status verifyAndApply(const ApplyTask& task, int index, size_t item, size_t nextItem) override;
  // cudaStreamWaitEvent(stream, streamEvent): no host wait.
  Status waitFor(void* streamEvent) override;
  // cudaMemcpyAsync on the stream (cudaMemcpyDefault: device to device for device pointers).
  Status copy(void* dst, const void* src, size_t bytes) override;
  // Device memory from the pool, grown (never shrunk) stream-ordered: a replaced block is reused only after
  // the work already enqueued on it. Null for 0 bytes before any growth.
  Status scratch(size_t bytes, void** out) override;

  // Records an event after the work enqueued so far (once) and queries it: *done once the stream has
  // passed it (and no work was enqueued after it). Errors of the stream's work come back here.
  Status scanNonFinite(const std::vector<ScanSpan>& spans, DataType dtype) override;
  std::vector<NonFiniteCount> nonFiniteCounts() const override;
  Status syncTest(bool* done) override;
  // Blocking form: cudaStreamSynchronize on the communication stream (tests, teardown).
  Status sync();
  SliceCheck verdict(size_t item) const override;

  // Events on `callerStream` (a cudaStream_t; null: the legacy default stream): the collective's stream
  // work waits for what the caller enqueued before the call, and orderCaller() makes the caller's stream
  // wait for the collective. A stream being captured into a CUDA graph is refused (kInvalidArgument).
  // Thread-safe against the progress thread: it touches no executor state.
  void bindThread() override;
  Status makeFence(void* callerStream, std::unique_ptr<Fence>* out) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  // Per receive slot (and one more for sealFirst): device words and the crc32Device scratch.
  struct WorkArea {
    uint32_t payloadCrc;  // CRC of the slot payload (or of sealFirst's data)
    uint32_t dstCrc;      // CRC of dst after the apply
    uint32_t verdict;     // SliceCheck of the last apply
    uint32_t pad;
    // followed by scratch: crc32DeviceScratchBytes(workScratchBytes_) bytes
  };

  Status growDevice(void** ptr, size_t* capacity, size_t bytes);
  Status growWork(size_t areas, size_t scratchBytes);
  WorkArea* work(size_t area) const;
  void* workScratch(size_t area) const;
  Status releaseRetired();
  Status freeAll();

  const int device_;
  DevicePool* const pool_;
  PinnedHostPool* const pinned_;
  const cudaStream_t stream_;

  // Device memory (DevicePool), grown on demand.
  Trailer* trailers_ = nullptr;  // items
  size_t trailersCap_ = 0;       // bytes
  uint8_t* slots_ = nullptr;     // slots * slotStride_
  size_t slotsCap_ = 0;          // bytes
  size_t slotStride_ = 0;
  Trailer* slotTrailers_ = nullptr;
  size_t slotTrailersCap_ = 0;
  void* scratch_ = nullptr;  // scratch()
  size_t scratchCap_ = 0;
  uint8_t* work_ = nullptr;  // workAreas_ areas of workStride_ bytes: slots, then the sealFirst area
  size_t workCap_ = 0;
  size_t workStride_ = 0;
  size_t workAreas_ = 0;
  size_t workScratchBytes_ = 0;  // crc32Device scratch per area
  size_t numSlots_ = 0;
  size_t items_ = 0;

  // Pinned host memory (PinnedHostPool): verdicts, written by the kernels through verdictsDevice_.
  uint8_t* verdicts_ = nullptr;
  uint8_t* verdictsDevice_ = nullptr;
  size_t verdictsCap_ = 0;
  std::vector<void*> retiredPinned_;  // replaced pinned blocks, freed once the stream has passed them
  // scanNonFinite: one NanScanResult per span on the device, copied to pinned memory on the stream.
  void* scansDevice_ = nullptr;
  size_t scansDeviceCap_ = 0;  // bytes
  void* scansHost_ = nullptr;  // pinned, scansHostCap_ results
  size_t scansHostCap_ = 0;
  size_t scans_ = 0;  // spans of the last scanNonFinite

  // syncTest
  cudaEvent_t syncEvent_ = nullptr;
  uint64_t enqueued_ = 0;    // calls that enqueued work
  uint64_t recordedAt_ = 0;  // enqueued_ when syncEvent_ was recorded
  bool syncPending_ = false;
};

}  // namespace ringguard
