#pragma once
// The collectives' NaN check (RINGGUARD_NAN_CHECK; docs/GUARD.md, "The collectives' NaN check"): run by
// the communicator on its progress thread once the collective's input is ready (after the caller's stream
// reached it) and before the collective starts.
#include <vector>

#include "algorithms/agreement.h"
#include "executor/executor.h"
#include "ringguard/core/non_finite.h"

namespace ringguard {

// The input of one collective on this rank: spans of `dtype` elements, element offsets counted from
// `base` (what an error or warning names as the index).
struct CollectiveInput {
  const void* base = nullptr;
  std::vector<Executor::ScanSpan> spans;
  DataType dtype = DataType::kFloat32;
  // An input of one buffer is this span rather than an entry of `spans`: a call builds no vector (a heap
  // allocation on every collective), the NaN check builds one when it runs (all()).
  Executor::ScanSpan one{nullptr, 0};

  static CollectiveInput of(const void* data, size_t count, DataType dtype) {
    CollectiveInput in;
    in.base = data;
    in.dtype = dtype;
    in.one = Executor::ScanSpan{data, count};
    return in;
  }
  std::vector<Executor::ScanSpan> all() const {
    std::vector<Executor::ScanSpan> v = spans;
    if (one.data != nullptr) v.insert(v.begin(), one);
    return v;
  }
};

// off: nothing. warn: a warning naming this rank, the collective and the first index, then the collective
// runs. error: kInvalidArgument naming the same (the communicator announces it, so the other ranks fail
// with it as a peer error). skip: one dissemination round (ceil(log2 N) control frames per rank) tells
// every rank whether any rank's input holds non-finite values; if so *skip is set on every rank, the
// collective does not run and its output stays as it was. Counts in ctx.counters (nonFiniteInputs,
// skipped).
Status checkCollectiveInput(const CollectiveContext& ctx, Executor* exec, NanCheck mode,
                            const CollectiveInput& input, bool* skip);

}  // namespace ringguard
