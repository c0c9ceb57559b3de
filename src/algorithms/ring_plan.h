#pragma once
// The ring over a RingSchedule, as a pipeline plan: allreduce runs steps 0 .. 2N-3, reduce-scatter the
// reduce steps 0 .. N-2, all-gather the copy steps N-1 .. 2N-3 (docs/design/protocol.md, "Ring schedule").
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/pipeline.h"
#include "core/ring_schedule.h"

namespace ringguard {

class RingPlan final : public PipelinePlan {
 public:
  enum class Kind { kAllreduce, kReduceScatter, kAllgather };

  // allreduce: `input` and `output` full size (may be equal), columns cut by the schedule.
  // reduceScatter: `input` full size, `output` this rank's block, `scratch` full size (accumulators of
  //   the blocks this rank forwards); the schedule is RingSchedule::blocks.
  // allgather: `input` this rank's block, `output` full size; the schedule is RingSchedule::blocks.
  // The blocks ride column j = block j - 1, so the block a rank finishes (reduce-scatter) or starts with
  // (all-gather) is its own.
  RingPlan(Kind kind, const RingSchedule& schedule, int rank, DataType dtype, ReduceOp op, const void* input,
           void* output, void* scratch);

  int numSteps() const override { return steps_; }
  int numColumns() const override { return sched_.nranks(); }
  int numSlices() const override { return sched_.slicesPerColumn(); }
  size_t slotBytes() const override;
  DataType dtype() const override { return dtype_; }
  ReduceOp op() const override { return op_; }
  int nranks() const override { return sched_.nranks(); }

  std::vector<PlanItem> passOrder() const override;
  int sender(int column, int step) const override { return sched_.sender(column, first_ + step); }
  int receiver(int column, int step) const override { return sched_.receiver(column, first_ + step); }
  int lastStep(int column) const override { return steps_ - 1; }
  int sendColumn(int step) const override { return sched_.sendColumn(me_, first_ + step); }
  int recvColumn(int step) const override { return sched_.recvColumn(me_, first_ + step); }
  ElementRange range(int column, int slice) const override { return sched_.slice(blockOf(column), slice); }
  const uint8_t* sendBytes(int column, int step, const ElementRange& r, bool* origin) const override;
  uint8_t* originCopy(int column, const ElementRange& r) const override;
  RecvTarget recvTarget(int column, int step, const ElementRange& r) const override;
  int overwritesSendOf(int step) const override;

 private:
  int blockOf(int column) const;
  size_t byteOffset(const ElementRange& r) const { return r.offset * esize_; }
  // Offset of `r` in a buffer that holds only this rank's block.
  size_t ownBlockOffset(const ElementRange& r) const;

  const Kind kind_;
  const RingSchedule& sched_;
  const int me_;
  const DataType dtype_;
  const ReduceOp op_;
  const size_t esize_;
  const uint8_t* input_;
  uint8_t* output_;
  uint8_t* scratch_;
  int first_ = 0;  // schedule step of the plan's step 0
  int steps_ = 0;
};

}  // namespace ringguard
