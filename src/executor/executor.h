#pragma once
// The executor's face: executors own the memory a collective verifies and reduces in, and run "verify, then
// reduce or copy" on each received slice (docs/design/protocol.md, "Executors"). The algorithms are written
// against this interface and the runtime picks the implementation: the host executor
// (executor/host_executor.h) works synchronously on host memory; the device executor
// (executor/device/device_executor.h) enqueues the same steps as kernels of the CUDA layer on its stream.
// The algorithm never reads a verdict before sync(), so a device executor needs no host round trip per
// slice.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/corruption_plan.h"
#include "core/trailer.h"
#include "ringguard/core/non_finite.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

struct ApplyTask {
  SliceId expected;             // what the schedule says must have arrived in the slot
  SliceId next;                 // identity of the forwarded slice (when `forwarded`)
  void* dst = nullptr;          // accumulator / result
  const void* local = nullptr;  // this rank's operand for a reduction (may alias dst)
  size_t count = 0;             // elements
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool reduce = false;  // reduce-scatter step (else: all-gather copy)
  // The payload was received straight into dst (all-gather, broadcast, send/recv, all-to-all): slot
  // `index` holds only its trailer, nothing is copied, dst is verified where it lies. Only with !reduce.
  // A rejected slice leaves dst holding what arrived (never used: it is forwarded poisoned and repaired).
  bool inPlace = false;
  bool finalStep = false;  // avg divides here
  bool forwarded = false;  // dst is sent on at the next step
  int nranks = 1;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // What memory the buffers it works on are (the payloads, slots and trailers).
  virtual MemoryKind memory() const { return MemoryKind::kHost; }

  // Per-collective storage: a trailer for each of `items` sends, a verdict for each received item, and
  // `slots` receive slots of `slotBytes` payload bytes each.
  virtual Status prepare(size_t items, int slots, size_t slotBytes) = 0;
  virtual Trailer* sendTrailer(size_t item) = 0;  // memory the transport sends the trailer from
  virtual void* slot(int index) = 0;              // memory the transport receives a payload into
  virtual Trailer* slotTrailer(int index) = 0;

  // The trailer of a slice that starts its journey here: CRC of `bytes` at `data`, sealed with `id`.
  virtual Status sealFirst(size_t item, const void* data, const SliceId& id) = 0;
  // Sets a new attempt number on sendTrailer(item), keeping its payload CRC (a retransmission).
  virtual Status retag(size_t item, uint16_t attempt) = 0;
  // Fault injection in executor order: damages the received payload (`bytes` bytes at `payload`; nullptr:
  // slot `index`'s) or slot `index`'s trailer as `plan` (FaultInjector::plan) says, after the work enqueued
  // so far and before the next verifyAndApply. A device executor enqueues a kernel on its stream (no host
  // wait). kInvalidArgument when the plan does not fit (corruptionPlanFits) or the slot is out of range.
  virtual Status corruptReceived(int index, void* payload, size_t bytes, const CorruptionPlan& plan) = 0;

  // Verifies slot `index` against task.expected and only then reduces or copies it into task.dst.
  // Records the verdict of `item`; when task.forwarded, writes the trailer of the next step (CRC of dst,
  // poisoned when the slice was not applied) into sendTrailer(nextItem). dst is sent on either way.
  virtual Status verifyAndApply(const ApplyTask& task, int index, size_t item, size_t nextItem) = 0;

  // Orders the executor's later work after a transport's stream event (FrameRequest::streamEvent, a
  // cudaEvent_t): a device executor's stream waits for it. Null, and host executors: nothing to do.
  virtual Status waitFor(void* streamEvent) { return Status::ok(); }

  // Copies `bytes` between two buffers of the collective (single rank, out of place).
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // copy(), where this rank does not read `dst` again during the collective (a large column's origin copy
  // into the output, sealed and sent from the input): a host executor stores it past the cache, saving the
  // read of every destination line an ordinary store makes first (docs/PERFORMANCE.md, "Thirtieth
  // session").
  virtual Status copyCold(void* dst, const void* src, size_t bytes) { return copy(dst, src, bytes); }

  // Memory of the executor's kind (host or device) for partial results a collective does not keep
  // (reduce-scatter's intermediate accumulators): at least `bytes`, valid until the next prepare() or
  // scratch() call, grown on demand, never shrunk. Its contents are unspecified.
  virtual Status scratch(size_t bytes, void** out) = 0;

  // RINGGUARD_NAN_CHECK: counts the non-finite elements of each span of the collective's input, in
  // executor order (so after the caller's stream produced the input); the counts are readable with
  // nonFiniteCounts() once syncTest reported done. The default scans host memory at once; a device
  // executor enqueues a scan kernel per span and a copy of the counts to pinned memory.
  struct ScanSpan {
    const void* data;
    size_t count;
  };
  virtual Status scanNonFinite(const std::vector<ScanSpan>& spans, DataType dtype) {
    scans_.clear();
    for (const ScanSpan& s : spans) scans_.push_back(ringguard::scanNonFinite(s.data, s.count, dtype));
    return Status::ok();
  }
  virtual std::vector<NonFiniteCount> nonFiniteCounts() const { return scans_; }

  // Polled until *done: then every verdict recorded so far is readable with verdict(). Never blocks, so
  // the caller's wait keeps its timeout and its watch for peer errors (a dead peer must not hang us).
  virtual Status syncTest(bool* done) = 0;
  virtual SliceCheck verdict(size_t item) const = 0;

  // Orders one collective against the caller's stream (`callerStream` is a cudaStream_t, or null for
  // host memory). Made on the caller's thread when the collective is enqueued (it may refuse a stream that
  // is being captured into a CUDA graph); host executors need none and leave *out empty.
  class Fence {
   public:
    virtual ~Fence() = default;
    virtual Status beforeCollective() = 0;  // progress thread: the communication stream waits for the inputs
    virtual Status afterCollective() = 0;   // progress thread: marks the results ready
    virtual Status orderCaller() = 0;       // Work::wait: the caller's stream waits for the results
  };
  // Called once on the progress thread before it runs anything: a device executor makes its GPU current
  // there, so every CUDA call of the transports (events, copies) lands on the right device.
  virtual void bindThread() {}
  virtual Status makeFence(void* callerStream, std::unique_ptr<Fence>* out) {
    out->reset();
    return Status::ok();
  }

 private:
  std::vector<NonFiniteCount> scans_;  // the default scanNonFinite's counts
};

}  // namespace ringguard
