#pragma once
// The verified pipeline every collective runs on (docs/design/protocol.md, "One pipeline"): the pass
// (post, verify, apply, forward) and the repair rounds (retransmit retained bytes, replay the dependent
// hops), over a plan that says which hops this rank takes part in and where their bytes lie. Private to
// the algorithms layer: each collective (one per file) builds a plan and runs it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/agreement.h"
#include "core/repair.h"
#include "core/ring_schedule.h"
#include "executor/executor.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/types.h"

namespace ringguard {

// One (step, slice) of this rank: a receive, a send, or both (a ring hop receives and sends at once).
struct PlanItem {
  int step = 0;
  int slice = 0;
  bool recv = false;
  bool send = false;
};

// Where one received slice goes (the ApplyTask without its identities).
struct RecvTarget {
  uint8_t* dst = nullptr;
  const uint8_t* local = nullptr;  // reductions only
  bool reduce = false;
  bool inPlace = false;
  bool finalStep = false;  // avg divides here
  bool forwarded = false;  // sent on by this rank at step + 1
};

// A collective's data movement. A column is a stream of bytes that travels a fixed route hop by hop
// (step by step); every column is cut into the same number of slices. Everything here is a pure function
// of the arguments every rank agreed on in the fingerprint, so all ranks compute the same routes.
class PipelinePlan {
 public:
  virtual ~PipelinePlan() = default;

  virtual int numSteps() const = 0;
  virtual int numColumns() const = 0;
  virtual int numSlices() const = 0;
  // Slices of `column` as this rank knows it, for checking the failures peers report: numSlices() where
  // every rank knows every column's length; -1 where this rank cannot know it (a point-to-point flow
  // between two other ranks: its endpoints check the bound).
  virtual int columnSlices(int column) const { return numSlices(); }
  // Bytes of the largest slice this rank receives into a slot (0: every receive is in place).
  virtual size_t slotBytes() const = 0;
  virtual DataType dtype() const = 0;
  virtual ReduceOp op() const { return ReduceOp::kSum; }
  virtual int nranks() const = 0;

  // This rank's items in the order the pass posts and applies them.
  virtual std::vector<PlanItem> passOrder() const = 0;
  // Route: the rank that sends / receives `column` at `step`, or -1 when the column has no hop then.
  virtual int sender(int column, int step) const = 0;
  virtual int receiver(int column, int step) const = 0;
  // The last hop of `column` (a repair replays from the failed hop to here).
  virtual int lastStep(int column) const = 0;
  // The column this rank sends / receives at `step` (-1: none).
  virtual int sendColumn(int step) const = 0;
  virtual int recvColumn(int step) const = 0;
  virtual ElementRange range(int column, int slice) const = 0;

  // Bytes this rank sends for (column, step, slice range): the origin's input (`*origin` true: sealed
  // here) or what this rank applied at step - 1 (its trailer was written by that apply).
  virtual const uint8_t* sendBytes(int column, int step, const ElementRange& r, bool* origin) const = 0;
  // Where an origin slice (sendBytes with *origin) is also copied to, or null: all-gather's own block of the
  // output, a broadcast root's output (out of place). A column of several slices is copied slice by slice
  // before each is sealed, and sealed and sent from the copy, which is then in cache; a column of one slice
  // is sealed and sent from the input and copied once its send is posted, off the peer's path.
  virtual uint8_t* originCopy(int column, const ElementRange& r) const { return nullptr; }
  virtual RecvTarget recvTarget(int column, int step, const ElementRange& r) const = 0;
  // A receive at `step` overwrites bytes this rank sent at the returned step (that send must be complete
  // first), or -1.
  virtual int overwritesSendOf(int step) const { return -1; }
  // The sequence number the trailers of `column` carry: the collective's, or a point-to-point flow's own.
  virtual uint64_t sliceSeq(int column, uint64_t collectiveSeq) const { return collectiveSeq; }
};

// How the ranks learn each other's failures after a pass or round: `mine` are the failures this rank
// detected; `*repair` gets every failure this rank must take part in repairing, identical on both ends
// of each failed hop. Group collectives exchange with every rank; point-to-point only with the peers.
// Every entry a peer sent is checked (checkPlanFailure) before it is returned: the pipeline indexes its
// trailers and slots with them.
using VerdictExchange = std::function<Status(int round, const std::vector<SliceFailure>& mine,
                                             std::vector<SliceFailure>* repair)>;

// Runs `plan` on this rank: the pass, then verdict exchanges and repair rounds until no failure is left
// (kCorruption after maxRetries rounds, the same on every rank involved). Adds to ctx.counters.
Status runPipeline(const CollectiveContext& ctx, Executor* exec, const PipelinePlan& plan,
                   const VerdictExchange& exchange);

// The verdict exchange of the group collectives (exchangeVerdicts over every rank), every entry a peer
// sends checked against `plan`'s routes.
VerdictExchange groupVerdicts(const CollectiveContext& ctx, const PipelinePlan& plan);
// OK when `f` names a hop of `plan` (column, slice and step in range, sender and receiver its route).
Status checkPlanFailure(const PipelinePlan& plan, const SliceFailure& f);

}  // namespace ringguard
