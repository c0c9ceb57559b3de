#pragma once
// The ring schedule of a chunked reduce-scatter + all-gather (docs/design/protocol.md, "Ring schedule").
// Pure arithmetic: which column a rank sends and receives at each step, and where each slice lies.
#include <cstddef>
#include <cstdint>

namespace ringguard {

struct ElementRange {
  size_t offset = 0;  // in elements from the start of the buffer
  size_t count = 0;
};

class RingSchedule {
 public:
  // Columns and slices start at multiples of kAlignBytes from the buffer start where the element size
  // divides it (all of ringguard's types): on an aligned buffer every slice can then be moved with 16-byte
  // vectors, and the device's fused apply + CRC kernel applies (docs/GPU.md).
  static constexpr size_t kAlignBytes = 16;

  // `sliceBytes` is rounded down to whole elements (at least one element per slice), then to a multiple
  // of kAlignBytes when it holds at least that.
  RingSchedule(int nranks, size_t count, size_t elementSize, size_t sliceBytes);
  // Columns of exactly `blockCount` elements, column j at j * blockCount (count = nranks * blockCount):
  // reduce-scatter and all-gather, whose blocks the caller lays out. Slices as above, from each block's
  // start (aligned where blockCount * elementSize is a multiple of kAlignBytes).
  static RingSchedule blocks(int nranks, size_t blockCount, size_t elementSize, size_t sliceBytes);
  // Elements per slice for `sliceBytes`: whole elements, at least one, a multiple of kAlignBytes when it
  // holds that much. Every pipeline plan cuts its slices with it (the chain and the flows too).
  static size_t sliceElementsFor(size_t elementSize, size_t sliceBytes);

  int nranks() const { return nranks_; }
  size_t count() const { return count_; }
  size_t sliceElements() const { return sliceElements_; }
  int slicesPerColumn() const { return slicesPerColumn_; }
  // 2(N-1) steps; 0 for a single rank or an empty buffer.
  int numSteps() const { return numSteps_; }

  // Columns are whole units of kAlignBytes (of `unit()` elements), their unit counts differing by at most
  // one (the first columns get the extra ones); the last column also gets the count % unit() elements
  // after the last whole unit.
  ElementRange column(int j) const;
  ElementRange slice(int column, int k) const;  // may be empty near the end of a short column
  size_t unit() const { return unit_; }

  // Step t < N-1 reduces into the accumulator; later steps copy the finished value.
  bool isReduceStep(int step) const { return step < nranks_ - 1; }
  // The step whose receiver holds the finished value of the column (avg divides here).
  bool isFinalReduceStep(int step) const { return step == nranks_ - 2; }
  // The received slice is sent on at the next step (all but the last step).
  bool isForwarded(int step) const { return step + 1 < numSteps_; }

  int sendColumn(int rank, int step) const { return mod(rank - step); }
  int recvColumn(int rank, int step) const { return mod(rank - step - 1); }
  int sender(int column, int step) const { return mod(column + step); }
  int receiver(int column, int step) const { return mod(column + step + 1); }
  int rightOf(int rank) const { return mod(rank + 1); }
  int leftOf(int rank) const { return mod(rank - 1); }

 private:
  RingSchedule(int nranks, size_t count, size_t elementSize, size_t sliceBytes, size_t block);
  int mod(int x) const { return ((x % nranks_) + nranks_) % nranks_; }

  int nranks_;
  size_t count_;
  size_t unit_ = 1;   // elements per kAlignBytes
  size_t block_ = 0;  // blocks(): elements per column; 0: columns cut at whole units
  size_t sliceElements_;
  int slicesPerColumn_;
  int numSteps_;
};

}  // namespace ringguard
