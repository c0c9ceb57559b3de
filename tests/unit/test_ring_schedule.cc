// The ring schedule (docs/design/protocol.md, "Ring schedule"): how the buffer is cut into columns and
// slices, and which rank sends which column at each step. Checked exhaustively for 1..64 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ring_schedule.h"

namespace ringguard {
namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kElementSizes[] = {1, 2, 4, 8};
constexpr size_t kSliceBytes[] = {4, 64, size_t(1) << 20};

std::vector<size_t> countsFor(int n) {
  std::vector<size_t> counts = {0,    1,     size_t(n) - 1,  size_t(n),          size_t(n) + 1,
                                1000, 12345, 16 * size_t(n), 16 * size_t(n) + 7, 16 * size_t(n) + 17};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

std::string describe(int n, size_t count, size_t elementSize, size_t sliceBytes) {
  return "N=" + std::to_string(n) + " count=" + std::to_string(count) +
         " elementSize=" + std::to_string(elementSize) + " sliceBytes=" + std::to_string(sliceBytes);
}

// Columns and slices partition [0, count) as the protocol says.
void checkLayout(int n, size_t count, size_t elementSize, size_t sliceBytes) {
  const RingSchedule s(n, count, elementSize, sliceBytes);
  ASSERT_EQ(s.nranks(), n);
  ASSERT_EQ(s.count(), count);
  // 16-byte units: 16, 8, 4, 2 elements of 1, 2, 4, 8 bytes.
  const size_t unit = 16 / elementSize;
  ASSERT_EQ(s.unit(), unit);
  size_t sliceElements = std::max<size_t>(1, sliceBytes / elementSize);
  if (sliceElements >= unit) sliceElements = sliceElements / unit * unit;
  ASSERT_EQ(s.sliceElements(), sliceElements);
  ASSERT_EQ(s.numSteps(), (n == 1 || count == 0) ? 0 : 2 * (n - 1));

  const size_t base = count / unit / n;
  const size_t extra = count / unit % n;
  const size_t rest = count % unit;
  std::vector<size_t> want(n);
  for (int j = 0; j < n; ++j) want[j] = (base + (size_t(j) < extra ? 1 : 0)) * unit + (j == n - 1 ? rest : 0);
  const size_t largest = *std::max_element(want.begin(), want.end());
  const int expectedSlices =
      static_cast<int>(std::max<size_t>(1, (largest + sliceElements - 1) / sliceElements));
  ASSERT_EQ(s.slicesPerColumn(), expectedSlices);

  size_t next = 0;
  size_t minSize = ~size_t(0), maxSize = 0;
  for (int j = 0; j < n; ++j) {
    const ElementRange c = s.column(j);
    ASSERT_EQ(c.offset, next) << "column " << j << " is not contiguous with the previous one";
    ASSERT_EQ(c.count, want[j]) << "column " << j;
    ASSERT_EQ(c.offset * elementSize % 16, 0u) << "column " << j << " does not start on a 16-byte boundary";
    minSize = std::min(minSize, c.count);
    maxSize = std::max(maxSize, c.count);
    next = c.offset + c.count;

    // Slices of the column: contiguous, each at most sliceElements, covering the column exactly.
    size_t inColumn = c.offset;
    for (int k = 0; k < s.slicesPerColumn(); ++k) {
      const ElementRange sl = s.slice(j, k);
      ASSERT_EQ(sl.offset, inColumn) << "column " << j << " slice " << k;
      ASSERT_LE(sl.count, sliceElements) << "column " << j << " slice " << k;
      if (sliceElements >= unit) {
        ASSERT_EQ(sl.offset * elementSize % 16, 0u) << "column " << j << " slice " << k << " is not aligned";
      }
      // Only the tail of a column may be short: a slice is full unless the column ends inside it.
      if (sl.offset + sl.count < c.offset + c.count) {
        ASSERT_EQ(sl.count, sliceElements) << "column " << j << " slice " << k;
      }
      inColumn += sl.count;
    }
    ASSERT_EQ(inColumn, c.offset + c.count) << "slices do not cover column " << j;
    // Past the last slice there is nothing left.
    const ElementRange beyond = s.slice(j, s.slicesPerColumn());
    ASSERT_EQ(beyond.count, 0u) << "column " << j;
  }
  ASSERT_EQ(next, count) << "columns do not cover the buffer";
  // Balanced to within one unit, plus the rest of less than a unit in the last column.
  ASSERT_LE(maxSize - minSize, 2 * unit - 1);
  // S is the smallest count that holds the largest column: its last slice is not empty.
  if (count > 0) {
    const int biggest = want[0] >= want[n - 1] ? 0 : n - 1;
    ASSERT_GT(s.slice(biggest, s.slicesPerColumn() - 1).count, 0u);
  }
}

TEST(RingScheduleTest, ColumnsAndSlicesPartitionTheBuffer) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (size_t count : countsFor(n)) {
      for (size_t sliceBytes : kSliceBytes) {
        for (size_t elementSize : kElementSizes) {
          SCOPED_TRACE(describe(n, count, elementSize, sliceBytes));
          checkLayout(n, count, elementSize, sliceBytes);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The step arithmetic depends only on N; numSteps on whether there is anything to move.
void checkSteps(int n) {
  const RingSchedule s(n, size_t(n) * 3 + 1, 4, 64);
  const int steps = s.numSteps();
  ASSERT_EQ(steps, 2 * (n - 1));

  for (int t = 0; t < steps; ++t) {
    std::vector<int> sentBy(n, -1), receivedBy(n, -1);
    for (int r = 0; r < n; ++r) {
      const int sc = s.sendColumn(r, t);
      const int rc = s.recvColumn(r, t);
      ASSERT_GE(sc, 0);
      ASSERT_LT(sc, n);
      ASSERT_GE(rc, 0);
      ASSERT_LT(rc, n);
      ASSERT_EQ(sc, ((r - t) % n + n) % n) << "rank " << r << " step " << t;
      ASSERT_EQ(sentBy[sc], -1) << "column " << sc << " sent twice at step " << t;
      ASSERT_EQ(receivedBy[rc], -1) << "column " << rc << " received twice at step " << t;
      sentBy[sc] = r;
      receivedBy[rc] = r;
      // What r receives is what its left neighbour sends, and r sends to its right neighbour.
      ASSERT_EQ(rc, s.sendColumn(s.leftOf(r), t)) << "rank " << r << " step " << t;
      ASSERT_EQ(s.sender(sc, t), r);
      ASSERT_EQ(s.receiver(sc, t), s.rightOf(r));
      ASSERT_EQ(s.receiver(rc, t), r);
      ASSERT_EQ(s.sender(rc, t), s.leftOf(r));
    }
    // Every column is sent by exactly one rank and received by exactly one rank at every step.
    for (int c = 0; c < n; ++c) {
      ASSERT_NE(sentBy[c], -1) << "column " << c << " step " << t;
      ASSERT_NE(receivedBy[c], -1) << "column " << c << " step " << t;
    }
  }

  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(s.rightOf(r), (r + 1) % n);
    ASSERT_EQ(s.leftOf(r), (r + n - 1) % n);
    ASSERT_EQ(s.leftOf(s.rightOf(r)), r);
  }

  for (int c = 0; c < n && steps > 0; ++c) {
    // Reduce-scatter: the column starts at its origin c and visits every other rank once.
    ASSERT_EQ(s.sender(c, 0), c);
    std::vector<int> reduced(n, 0);
    for (int t = 0; t <= n - 2; ++t) {
      ASSERT_EQ(s.sender(c, t), (c + t) % n);
      ASSERT_EQ(s.receiver(c, t), (c + t + 1) % n);
      ++reduced[s.receiver(c, t)];
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(reduced[r], r == c ? 0 : 1) << "column " << c << " rank " << r;
    const int owner = (c + n - 1) % n;
    ASSERT_EQ(s.receiver(c, n - 2), owner);
    // All-gather: the owner's value reaches every rank but the owner exactly once.
    ASSERT_EQ(s.sender(c, n - 1), owner);
    std::vector<int> gathered(n, 0);
    for (int t = n - 1; t <= 2 * n - 3; ++t) ++gathered[s.receiver(c, t)];
    for (int r = 0; r < n; ++r) ASSERT_EQ(gathered[r], r == owner ? 0 : 1) << "column " << c << " rank " << r;
    // The chain is unbroken: who receives at step t sends at step t+1.
    for (int t = 0; t + 1 < steps; ++t) ASSERT_EQ(s.receiver(c, t), s.sender(c, t + 1)) << c << " " << t;
  }

  for (int t = 0; t < steps; ++t) {
    ASSERT_EQ(s.isReduceStep(t), t <= n - 2) << t;
    ASSERT_EQ(s.isFinalReduceStep(t), t == n - 2) << t;
    ASSERT_EQ(s.isForwarded(t), t < steps - 1) << t;
    // The final reduce step is the last reduce step and is forwarded (to start the all-gather).
    if (s.isFinalReduceStep(t)) {
      ASSERT_TRUE(s.isReduceStep(t));
      ASSERT_FALSE(s.isReduceStep(t + 1));
      ASSERT_TRUE(s.isForwarded(t));
    }
  }
  if (steps > 0) {
    int finals = 0;
    for (int t = 0; t < steps; ++t) finals += s.isFinalReduceStep(t) ? 1 : 0;
    ASSERT_EQ(finals, 1);
    ASSERT_FALSE(s.isForwarded(steps - 1));
  }
}

TEST(RingScheduleTest, EveryStepSendsAndReceivesOneColumnPerRank) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    SCOPED_TRACE("N=" + std::to_string(n));
    checkSteps(n);
    if (HasFatalFailure()) return;
  }
}

TEST(RingScheduleTest, NoStepsForOneRankOrEmptyBuffer) {
  EXPECT_EQ(RingSchedule(1, 1000, 4, 64).numSteps(), 0);
  EXPECT_EQ(RingSchedule(1, 0, 4, 64).numSteps(), 0);
  EXPECT_EQ(RingSchedule(8, 0, 4, 64).numSteps(), 0);
  EXPECT_EQ(RingSchedule(2, 1, 4, 64).numSteps(), 2);
  EXPECT_EQ(RingSchedule(8, 1, 4, 64).numSteps(), 14);
  // One rank: the only column is the whole buffer.
  const RingSchedule one(1, 1000, 4, 64);
  EXPECT_EQ(one.column(0).offset, 0u);
  EXPECT_EQ(one.column(0).count, 1000u);
  EXPECT_EQ(one.slicesPerColumn(), 63);  // ceil(1000 / 16)
  EXPECT_EQ(one.rightOf(0), 0);
  EXPECT_EQ(one.leftOf(0), 0);
  // An empty buffer still has one (empty) slice per column: the schedule stays uniform.
  const RingSchedule empty(4, 0, 4, 64);
  EXPECT_EQ(empty.slicesPerColumn(), 1);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(empty.column(j).count, 0u);
    EXPECT_EQ(empty.slice(j, 0).count, 0u);
  }
}

TEST(RingScheduleTest, HandComputedExample) {
  // 4 ranks, 37 f32 elements, 16-byte slices (4 elements). Columns are cut in 16-byte units of 4 elements:
  // 9 units over 4 columns is 3, 2, 2, 2 units, and the last column also takes the 37th element; so columns
  // of 12, 8, 8, 9 elements at 0, 12, 20, 28, and three slices per column (the largest holds 12).
  const RingSchedule s(4, 37, 4, 16);
  EXPECT_EQ(s.unit(), 4u);
  EXPECT_EQ(s.sliceElements(), 4u);
  EXPECT_EQ(s.slicesPerColumn(), 3);
  EXPECT_EQ(s.numSteps(), 6);
  const size_t offsets[] = {0, 12, 20, 28};
  const size_t sizes[] = {12, 8, 8, 9};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(s.column(j).offset, offsets[j]) << j;
    EXPECT_EQ(s.column(j).count, sizes[j]) << j;
  }
  EXPECT_EQ(s.slice(0, 0).offset, 0u);
  EXPECT_EQ(s.slice(0, 0).count, 4u);
  EXPECT_EQ(s.slice(0, 2).offset, 8u);
  EXPECT_EQ(s.slice(0, 2).count, 4u);
  EXPECT_EQ(s.slice(1, 1).offset, 16u);
  EXPECT_EQ(s.slice(1, 1).count, 4u);
  EXPECT_EQ(s.slice(1, 2).offset, 20u);  // empty slice at the end of a short column
  EXPECT_EQ(s.slice(1, 2).count, 0u);
  EXPECT_EQ(s.slice(3, 2).offset, 36u);  // the last column's extra element
  EXPECT_EQ(s.slice(3, 2).count, 1u);
  // Step 0: rank r sends column r and receives column r-1; step 1: rank 0 sends column 3.
  EXPECT_EQ(s.sendColumn(0, 0), 0);
  EXPECT_EQ(s.recvColumn(0, 0), 3);
  EXPECT_EQ(s.sendColumn(0, 1), 3);
  EXPECT_EQ(s.recvColumn(0, 1), 2);
  EXPECT_EQ(s.sendColumn(2, 5), 1);
  EXPECT_EQ(s.recvColumn(2, 5), 0);
  // Column 1: 1 -> 2 -> 3 -> 0 (owner after step 2), then 0 -> 1 -> 2 -> 3.
  EXPECT_EQ(s.receiver(1, 2), 0);
  EXPECT_TRUE(s.isFinalReduceStep(2));
  EXPECT_EQ(s.receiver(1, 5), 3);
}

TEST(RingScheduleTest, SliceBytesRoundDownToWholeElements) {
  EXPECT_EQ(RingSchedule(2, 100, 8, 4).sliceElements(), 1u);  // less than one element: one element
  EXPECT_EQ(RingSchedule(2, 100, 8, 0).sliceElements(), 1u);
  EXPECT_EQ(RingSchedule(2, 100, 8, 15).sliceElements(), 1u);
  EXPECT_EQ(RingSchedule(2, 100, 8, 16).sliceElements(), 2u);
  EXPECT_EQ(RingSchedule(2, 100, 2, 7).sliceElements(), 3u);
  EXPECT_EQ(RingSchedule(2, 100, 1, size_t(1) << 20).sliceElements(), size_t(1) << 20);
  // At least 16 bytes: down to a multiple of 16 bytes, so that slices start 16-byte aligned.
  EXPECT_EQ(RingSchedule(2, 100, 4, 40).sliceElements(), 8u);
  EXPECT_EQ(RingSchedule(2, 100, 1, 20).sliceElements(), 16u);
  EXPECT_EQ(RingSchedule(2, 100, 8, 24).sliceElements(), 2u);
  // 100 f16 elements, 2 ranks, 3 per slice: 12 units of 8 elements, columns of 48 and 48 + 4 -> 18 slices.
  EXPECT_EQ(RingSchedule(2, 100, 2, 7).slicesPerColumn(), 18);
}

TEST(RingScheduleTest, LargeCountColumnsAndSlices) {
  // 3 ranks, 2^33 + 2 u8 elements: columns hold more than 2^32 elements.
  const size_t count = (size_t(1) << 33) + 2;
  const RingSchedule s(3, count, 1, size_t(1) << 20);
  size_t total = 0;
  for (int j = 0; j < 3; ++j) total += s.column(j).count;
  EXPECT_EQ(total, count);
  EXPECT_EQ(s.column(2).offset + s.column(2).count, count);
  const int last = s.slicesPerColumn() - 1;
  EXPECT_EQ(s.slice(0, last).offset + s.slice(0, last).count, s.column(0).offset + s.column(0).count);
}

TEST(RingScheduleDeathTest, RejectsZeroRanksAndZeroElementSize) {
  EXPECT_DEATH((void)RingSchedule(0, 10, 4, 64), "at least one rank");
  EXPECT_DEATH((void)RingSchedule(2, 10, 0, 64), "element size");
}

}  // namespace
}  // namespace ringguard
