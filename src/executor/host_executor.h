#pragma once
// The Executor over host memory (src/executor/host_executor.cc): what every host communicator and the
// c10d backend's point-to-point lanes run, and the reference the device executor is held against.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "executor/executor.h"

namespace ringguard {

// ISA-L (or zlib) CRC and the host reduction, blocked so each output block is
// checksummed while it is still in cache.
class HostExecutor final : public Executor {
 public:
  Status prepare(size_t items, int slots, size_t slotBytes) override;
  Trailer* sendTrailer(size_t item) override { return &trailers_[item]; }
  void* slot(int index) override { return slots_[index].data(); }
  Trailer* slotTrailer(int index) override { return &slotTrailers_[index]; }
  Status sealFirst(size_t item, const void* data, const SliceId& id) override;
  Status retag(size_t item, uint16_t attempt) override;
  Status corruptReceived(int index, void* payload, size_t bytes, const CorruptionPlan& plan) override;
  Status verifyAndApply(const ApplyTask& task, int index, size_t item, size_t nextItem) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status copyCold(void* dst, const void* src, size_t bytes) override;
  Status scratch(size_t bytes, void** out) override;
  Status syncTest(bool* done) override {
    *done = true;
    return Status::ok();
  }
  SliceCheck verdict(size_t item) const override { return verdicts_[item]; }

 private:
  std::vector<Trailer> trailers_;
  std::vector<SliceCheck> verdicts_;
  std::vector<std::vector<uint8_t>> slots_;
  std::vector<Trailer> slotTrailers_;
  std::vector<uint8_t> scratch_;
};

}  // namespace ringguard
