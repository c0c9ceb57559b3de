// The sealed control channel over real MPI: control frames per collective, a damaged control frame
// ending in the same cause on every rank, and the handshake refusing ranks whose settings differ.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "transport/control/control_channel.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::makeComm;
using testing::makeInput;
using testing::worldRank;
using testing::worldSize;

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

TEST(MpiControl, FramesPerCollectiveAreTwiceCeilLog2N) {
  Options o;
  o.sliceBytes = 1024;
  auto comm = makeComm(o);
  const int me = worldRank(), n = worldSize();
  const size_t count = 4099;
  std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, me, count), out(in.size());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(comm->allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum).isOk());
    EXPECT_EQ(out, expectedResult(DataType::kFloat32, ReduceOp::kSum, n, count));
  }
  EXPECT_EQ(comm->counters().controlFrames, uint64_t(4 * 2 * ceilLog2(n)));
}

// Rank 0 hears from rank n - 1 in dissemination round 0; its first fingerprint frame is damaged.
TEST(MpiControl, DamagedControlFrameIsTheSameCauseOnEveryRank) {
  const int me = worldRank(), n = worldSize();
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  o.fault.mode = FaultMode::kControl;
  o.fault.schedule = {{0, int(ControlTag::kFingerprint), n - 1, 0}};
  auto comm = makeComm(o);
  std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, me, 100);
  Status st = comm->allreduce(in.data(), in.data(), 100, DataType::kInt32, ReduceOp::kSum);
  const std::string cause = "control frame fingerprint #0 from rank " + std::to_string(n - 1) +
                            " rejected on rank 0: CRC mismatch (damaged in transit)";
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.code(), me == 0 ? StatusCode::kTransportError : StatusCode::kPeerError) << st.toString();
  EXPECT_NE(st.message().find(cause), std::string::npos) << st.message();
  EXPECT_EQ(comm->allreduce(in.data(), in.data(), 100, DataType::kInt32, ReduceOp::kSum).toString(),
            st.toString());
  EXPECT_EQ(testing::sumOverRanks(comm->counters().injected), 1u);
  EXPECT_EQ(testing::sumOverRanks(comm->counters().detected), 1u);
}

TEST(MpiControl, HandshakeNamesTheSettingThatDiffers) {
  const int me = worldRank(), n = worldSize();
  Options o;
  o.sliceBytes = me == n - 1 ? 4096 : 8192;
  auto comm = makeComm(o);
  std::vector<uint8_t> in = makeInput(DataType::kFloat32, ReduceOp::kSum, me, 100);
  Status st = comm->allreduce(in.data(), in.data(), 100, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "communicator settings disagree: RINGGUARD_SLICE_BYTES differs: rank 0 has 8192, rank " +
                std::to_string(n - 1) + " has 4096");
}

}  // namespace
}  // namespace ringguard
