// decidePeerPath (runtime/peer_path_agreement.h): what every rank concludes from the gathered records before
// the peer windows exist: the settings that must match (each difference named with two ranks), the ranks
// that share a process, the first rank with a fault schedule (which keeps auto off the windows), and
// records a peer sent that are short, empty or from an older build.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/peer_path_agreement.h"

namespace ringguard {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

TEST(PeerPathAgreement, RecordsThatMatchAgree) {
  const std::vector<std::vector<uint8_t>> all = {peerPathRecord(4 << 20, NanCheck::kOff, 100, 0),
                                                 peerPathRecord(4 << 20, NanCheck::kOff, 101, 0),
                                                 peerPathRecord(4 << 20, NanCheck::kOff, 102, 0)};
  PeerPathAgreement a;
  ASSERT_TRUE(decidePeerPath(all, &a).isOk());
  EXPECT_EQ(a.sameProcess, std::make_pair(-1, -1));
  EXPECT_EQ(a.scheduleRank, -1);
}

TEST(PeerPathAgreement, TheFirstRankWithAScheduleIsNamed) {
  std::vector<std::vector<uint8_t>> all = {
      peerPathRecord(1024, NanCheck::kOff, 100, 0), peerPathRecord(1024, NanCheck::kOff, 101, 0),
      peerPathRecord(1024, NanCheck::kOff, 102, 2), peerPathRecord(1024, NanCheck::kOff, 103, 1)};
  PeerPathAgreement a;
  ASSERT_TRUE(decidePeerPath(all, &a).isOk());
  EXPECT_EQ(a.scheduleRank, 2);
  all[1] = peerPathRecord(1024, NanCheck::kOff, 101, 1);
  ASSERT_TRUE(decidePeerPath(all, &a).isOk());
  EXPECT_EQ(a.scheduleRank, 1);
}

TEST(PeerPathAgreement, RanksOfOneProcessAreNamed) {
  const std::vector<std::vector<uint8_t>> all = {
      peerPathRecord(1024, NanCheck::kWarn, 100, 0), peerPathRecord(1024, NanCheck::kWarn, 101, 0),
      peerPathRecord(1024, NanCheck::kWarn, 100, 0), peerPathRecord(1024, NanCheck::kWarn, 101, 0)};
  PeerPathAgreement a;
  ASSERT_TRUE(decidePeerPath(all, &a).isOk());
  EXPECT_EQ(a.sameProcess, std::make_pair(0, 2));
}

TEST(PeerPathAgreement, SettingsThatDifferFailNamingBothRanks) {
  PeerPathAgreement a;
  Status st = decidePeerPath(
      {peerPathRecord(1024, NanCheck::kOff, 100, 0), peerPathRecord(1024, NanCheck::kOff, 101, 0),
       peerPathRecord(2048, NanCheck::kOff, 102, 0)},
      &a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      st.message(),
      "RINGGUARD_PEER_TWO_SHOT_BYTES differs between ranks: rank 0 has 1024, rank 2 has 2048 (every rank "
      "must set the same)");
  st = decidePeerPath(
      {peerPathRecord(1024, NanCheck::kOff, 100, 0), peerPathRecord(1024, NanCheck::kError, 101, 0)}, &a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("RINGGUARD_NAN_CHECK differs between ranks: rank 0 has off, rank 1 has error"),
            std::string::npos)
      << st.toString();
}

// A peer's record is its bytes: empty, short or garbled records are differing settings, never a crash or an
// agreement; a record without the schedule field (a build before it) reads as no schedule.
TEST(PeerPathAgreement, HostileOrOlderRecords) {
  PeerPathAgreement a;
  Status st = decidePeerPath({peerPathRecord(1024, NanCheck::kOff, 100, 0), bytes("")}, &a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("rank 1 has"), std::string::npos) << st.toString();
  st = decidePeerPath({peerPathRecord(1024, NanCheck::kOff, 100, 0), bytes(std::string("1024\0off", 8))}, &a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  st = decidePeerPath({peerPathRecord(1024, NanCheck::kOff, 100, 0), bytes("1024 off 101")}, &a);
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(a.scheduleRank, -1);
  EXPECT_EQ(a.sameProcess, std::make_pair(-1, -1));
  ASSERT_TRUE(decidePeerPath({}, &a).isOk());  // no ranks: nothing to agree on
  EXPECT_EQ(a.scheduleRank, -1);
}

}  // namespace
}  // namespace ringguard
