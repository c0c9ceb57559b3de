// The host's drain of the direct path's call clocks (core/call_clock.h): the ring the peer kernels write
// while the timeline is on, read here as the kernels leave it, without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "core/call_clock.h"

namespace ringguard {
namespace peer {
namespace {

// What the last block's recordCallClock leaves for epoch e: start 1000 e, end 1000 e + e, kind word e % 6.
void write(std::vector<CallClock>* ring, uint64_t e) {
  CallClock& c = (*ring)[callClockSlot(e)];
  c.startNs = 1000 * e;
  c.endNs = 1000 * e + e;
  c.fingerprint = uint32_t(e % 6);
  c.dtype = 0;
  c.count = e * 3;
  c.epoch = e;
}

std::vector<FinishedCall> drain(const std::vector<CallClock>& ring, uint64_t* next, int64_t offset,
                                uint64_t* lost) {
  std::vector<FinishedCall> out;
  *lost = drainCallClocks(ring.data(), next, offset, [&](const FinishedCall& c) { out.push_back(c); });
  return out;
}

TEST(CallClock, TakesEveryFinishedCallInOrderOnTheHostClock) {
  std::vector<CallClock> ring(kCallClocks, CallClock{});
  uint64_t next = 0, lost = 0;
  EXPECT_TRUE(drain(ring, &next, 0, &lost).empty());  // nothing written: nothing, and no start known
  EXPECT_EQ(next, 0u);
  for (uint64_t e = 1; e <= 5; ++e) write(&ring, e);
  std::vector<FinishedCall> got = drain(ring, &next, -500, &lost);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(lost, 0u);
  for (uint64_t i = 0; i < 5; ++i) {
    const uint64_t e = i + 1;
    EXPECT_EQ(got[i].epoch, e);
    EXPECT_EQ(got[i].startNs, 1000 * e - 500) << "host = gpu + offset";
    EXPECT_EQ(got[i].durNs, e);
    EXPECT_EQ(got[i].fingerprint, uint32_t(e % 6));
    EXPECT_EQ(got[i].count, e * 3);
  }
  EXPECT_EQ(next, 6u);
  EXPECT_TRUE(drain(ring, &next, 0, &lost).empty()) << "each call is taken once";
  write(&ring, 6);
  got = drain(ring, &next, 0, &lost);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].epoch, 6u);
}

TEST(CallClock, StopsAtACallNotFinishedOrBeingRewritten) {
  std::vector<CallClock> ring(kCallClocks, CallClock{});
  write(&ring, 303 - kCallClocks);  // slot of 303 still holds the call of a lap before
  for (uint64_t e = 300; e <= 302; ++e) write(&ring, e);
  uint64_t next = 300, lost = 0;
  EXPECT_EQ(drain(ring, &next, 0, &lost).size(), 3u);
  EXPECT_EQ(next, 303u) << "303 has not finished: its slot holds an older call";
  EXPECT_EQ(lost, 0u);
  ring[callClockSlot(303)].epoch = 0;  // the kernel of 303 zeroes the epoch before it writes the fields
  EXPECT_TRUE(drain(ring, &next, 0, &lost).empty());
  EXPECT_EQ(lost, 0u);
  write(&ring, 303);
  EXPECT_EQ(drain(ring, &next, 0, &lost).size(), 1u);
  EXPECT_EQ(next, 304u);
}

TEST(CallClock, CountsTheCallsOverwrittenBeforeTheyWereTaken) {
  std::vector<CallClock> ring(kCallClocks, CallClock{});
  const uint64_t last = kCallClocks + 44;
  for (uint64_t e = 1; e <= last; ++e) write(&ring, e);
  uint64_t next = 1, lost = 0;
  const std::vector<FinishedCall> got = drain(ring, &next, 0, &lost);
  EXPECT_EQ(lost, 44u) << "epochs 1..44 were overwritten by 257..300";
  ASSERT_EQ(got.size(), size_t(kCallClocks));
  EXPECT_EQ(got.front().epoch, 45u);
  EXPECT_EQ(got.back().epoch, last);
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i].epoch, got[i - 1].epoch + 1);
  EXPECT_EQ(next, last + 1);
}

TEST(CallClock, ClocksTurnedOnLateStartAtTheOldestCallInTheRing) {
  std::vector<CallClock> ring(kCallClocks, CallClock{});
  for (uint64_t e = 1000; e <= 1003; ++e) write(&ring, e);
  uint64_t next = 0, lost = 0;
  const std::vector<FinishedCall> got = drain(ring, &next, 0, &lost);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got.front().epoch, 1000u);
  EXPECT_EQ(lost, 0u) << "calls before the clocks were on are not lost ones";
  EXPECT_EQ(next, 1004u);
}

TEST(CallClock, AnEndBeforeItsStartIsAZeroDuration) {
  std::vector<CallClock> ring(kCallClocks, CallClock{});
  write(&ring, 1);
  ring[1].endNs = ring[1].startNs - 5;  // clocks of two SMs a little apart
  uint64_t next = 1, lost = 0;
  const std::vector<FinishedCall> got = drain(ring, &next, 0, &lost);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].durNs, 0u);
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
