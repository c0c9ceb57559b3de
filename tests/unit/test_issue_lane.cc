// Issue lanes (ringguard/core/issue_lane.h): the thread's lane, its id, nesting, and the names refused.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "ringguard/core/crc32.h"
#include "ringguard/core/issue_lane.h"

namespace ringguard {
namespace {

TEST(IssueLaneTest, TheIdIsTheCrc32OfTheName) {
  EXPECT_EQ(issueLaneId("123456789"), 0xCBF43926u);
  EXPECT_EQ(issueLaneId("prefetch"), crc32("prefetch", 8));
}

TEST(IssueLaneTest, AScopeSetsTheThreadsLaneAndRestoresTheEnclosingOne) {
  EXPECT_EQ(currentIssueLane(), kNoIssueLane);
  {
    IssueLane outer("lane-outer");
    EXPECT_EQ(outer.id(), issueLaneId("lane-outer"));
    EXPECT_EQ(currentIssueLane(), outer.id());
    {
      IssueLane inner("lane-inner");
      EXPECT_EQ(currentIssueLane(), issueLaneId("lane-inner"));
    }
    EXPECT_EQ(currentIssueLane(), outer.id());
    // Another thread is in no lane: the lane is the thread's own.
    uint32_t there = 1;
    std::thread([&there] { there = currentIssueLane(); }).join();
    EXPECT_EQ(there, kNoIssueLane);
  }
  EXPECT_EQ(currentIssueLane(), kNoIssueLane);
}

TEST(IssueLaneTest, NamesAreKeptForMessagesAfterTheScopeEnds) {
  const uint32_t id = IssueLane("lane-kept").id();
  EXPECT_EQ(issueLaneName(id), "lane-kept");
  EXPECT_EQ(issueLaneName(kNoIssueLane), "");
  EXPECT_EQ(issueLaneName(issueLaneId("lane-never-entered")), "");
}

TEST(IssueLaneTest, RefusedNamesSayWhy) {
  EXPECT_TRUE(checkIssueLaneName("lane-ok").isOk());
  Status s = checkIssueLaneName("");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "an issue lane's name must not be empty");
  // Four bytes chosen so that the CRC-32 is 0, the id of "no lane".
  const std::string zero("zero-\xfc\x95\xae\xe4", 9);
  ASSERT_EQ(issueLaneId(zero), 0u);
  s = checkIssueLaneName(zero);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "issue lane '" + zero + "' has id 0 (its CRC-32), which means no lane: choose another name");
  // "plumless" and "buckeroo" share a CRC-32: once one is entered, the other is refused (messages could not
  // tell them apart); the entered one stays fine.
  ASSERT_EQ(issueLaneId("plumless"), issueLaneId("buckeroo"));
  // Names stay registered for the life of the process: before the first entry (not in a repeat) it is free.
  if (issueLaneName(issueLaneId("plumless")).empty()) EXPECT_TRUE(checkIssueLaneName("buckeroo").isOk());
  { IssueLane first("plumless"); }
  s = checkIssueLaneName("buckeroo");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "issue lanes 'buckeroo' and 'plumless' have the same id 0x4ddb0c25: rename one");
  EXPECT_TRUE(checkIssueLaneName("plumless").isOk());
}

TEST(IssueLaneDeathTest, EnteringARefusedNameIsAnInvariantFailure) {
  EXPECT_DEATH({ IssueLane empty(""); }, "IssueLane: an issue lane's name must not be empty");
}

}  // namespace
}  // namespace ringguard
