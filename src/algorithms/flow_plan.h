#pragma once
// Point-to-point flows as a pipeline plan (send/recv, all-to-all): each column is one flow from a sender
// to a receiver, one hop long, sent from the sender's input (its retained bytes) and received straight
// into the receiver's output, where it is verified. A flow is cut into slices; an empty flow still sends
// one empty slice, so its trailer checks that both ends agree it is empty.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "algorithms/pipeline.h"

namespace ringguard {

struct Flow {
  int column = 0;
  int peer = 0;       // receiver of an outgoing flow, sender of an incoming one
  int step = 0;       // the hop's step
  size_t offset = 0;  // elements from the start of the input (outgoing) or output (incoming)
  size_t count = 0;
  uint64_t seq = 0;  // what its trailers carry
};

// Route of any column: sender, receiver and step, for checking the failures peers report.
struct FlowRoute {
  int sender = -1;
  int receiver = -1;
  int step = -1;
};

class FlowPlan final : public PipelinePlan {
 public:
  // `outgoing` / `incoming`: this rank's flows, at most one of each per step.
  FlowPlan(int nranks, int rank, int numColumns, int numSteps, DataType dtype, size_t sliceBytes,
           const void* input, void* output, std::vector<Flow> outgoing, std::vector<Flow> incoming,
           std::function<FlowRoute(int column)> route);

  int numSteps() const override { return steps_; }
  int numColumns() const override { return columns_; }
  int numSlices() const override { return slices_; }  // the most of this rank's own flows
  int columnSlices(int column) const override;
  size_t slotBytes() const override { return 0; }  // every receive is in place
  DataType dtype() const override { return dtype_; }
  int nranks() const override { return n_; }

  std::vector<PlanItem> passOrder() const override;
  int sender(int column, int step) const override;
  int receiver(int column, int step) const override;
  int lastStep(int column) const override { return route_(column).step; }
  int sendColumn(int step) const override;
  int recvColumn(int step) const override;
  ElementRange range(int column, int slice) const override;
  const uint8_t* sendBytes(int column, int step, const ElementRange& r, bool* origin) const override;
  RecvTarget recvTarget(int column, int step, const ElementRange& r) const override;
  uint64_t sliceSeq(int column, uint64_t collectiveSeq) const override;

 private:
  const Flow* outAt(int step) const;
  const Flow* inAt(int step) const;
  const Flow* find(int column) const;
  int slicesOf(const Flow* f) const;

  const int n_, me_, columns_, steps_;
  const DataType dtype_;
  const size_t esize_;
  size_t sliceElems_ = 1;
  int slices_ = 1;
  const uint8_t* input_;
  uint8_t* output_;
  std::vector<Flow> out_, in_;
  // Looked up per item: by step (index into out_ / in_, -1: none) and by column (0: out_, 1: in_).
  std::vector<int> outAtStep_, inAtStep_;
  std::unordered_map<int, std::pair<int, int>> byColumn_;
  std::function<FlowRoute(int)> route_;
};

}  // namespace ringguard
