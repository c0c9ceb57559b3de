#include "core/ring_schedule.h"

#include <algorithm>

#include "ringguard/core/status.h"

namespace ringguard {

RingSchedule::RingSchedule(int nranks, size_t count, size_t elementSize, size_t sliceBytes)
    : RingSchedule(nranks, count, elementSize, sliceBytes, 0) {}

size_t RingSchedule::sliceElementsFor(size_t elementSize, size_t sliceBytes) {
  const size_t unit =
      (elementSize < kAlignBytes && kAlignBytes % elementSize == 0) ? kAlignBytes / elementSize : 1;
  size_t elements = std::max<size_t>(1, sliceBytes / elementSize);
  if (elements >= unit) elements -= elements % unit;
  return elements;
}

RingSchedule RingSchedule::blocks(int nranks, size_t blockCount, size_t elementSize, size_t sliceBytes) {
  RINGGUARD_ENFORCE(nranks >= 1, "ring needs at least one rank");
  return RingSchedule(nranks, blockCount * size_t(nranks), elementSize, sliceBytes, blockCount);
}

RingSchedule::RingSchedule(int nranks, size_t count, size_t elementSize, size_t sliceBytes, size_t block)
    : nranks_(nranks), count_(count), block_(block) {
  RINGGUARD_ENFORCE(nranks >= 1, "ring needs at least one rank");
  RINGGUARD_ENFORCE(elementSize >= 1, "element size must be positive");
  unit_ = (elementSize < kAlignBytes && kAlignBytes % elementSize == 0) ? kAlignBytes / elementSize : 1;
  sliceElements_ = sliceElementsFor(elementSize, sliceBytes);
  const size_t largest = std::max(column(0).count, column(nranks - 1).count);
  size_t slices = std::max<size_t>(1, (largest + sliceElements_ - 1) / sliceElements_);
  RINGGUARD_ENFORCE(slices <= size_t(1) << 30,
                    "ring schedule: more than 2^30 slices per column (raise sliceBytes)");
  slicesPerColumn_ = static_cast<int>(slices);
  numSteps_ = (nranks == 1 || count == 0) ? 0 : 2 * (nranks - 1);
}

ElementRange RingSchedule::column(int j) const {
  if (block_ != 0) return ElementRange{size_t(j) * block_, block_};
  const size_t units = count_ / unit_;
  const size_t base = units / nranks_;
  const size_t extra = units % nranks_;
  const size_t uj = static_cast<size_t>(j);
  ElementRange r;
  r.offset = (uj * base + std::min(uj, extra)) * unit_;
  r.count = (base + (uj < extra ? 1 : 0)) * unit_;
  if (j == nranks_ - 1) r.count += count_ % unit_;  // the elements after the last whole unit
  return r;
}

ElementRange RingSchedule::slice(int columnIndex, int k) const {
  ElementRange c = column(columnIndex);
  size_t start = std::min(c.count, static_cast<size_t>(k) * sliceElements_);
  size_t end = std::min(c.count, start + sliceElements_);
  return ElementRange{c.offset + start, end - start};
}

}  // namespace ringguard
