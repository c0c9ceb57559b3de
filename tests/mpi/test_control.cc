// The sealed control channel over real MPI: control frames per collective, a damaged control frame
// ending in the same cause on every rank, and the handshake refusing ranks whose settings differ.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stop_self.h"
#include "test_util.h"
#include "transport/control/control_channel.h"
#include "transport/mpi/mpi_transport.h"

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
  o.sliceBytes = 256;  // the pipeline: its fingerprint frames carry no payload
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

// The same damage to a small collective's fingerprint frame, which carries its payload (N <= 3): a link
// failure, repaired like a slice (docs/design/protocol.md, "Small collectives in one round").
TEST(MpiControl, DamagedFrameOfASmallCollectiveIsRepaired) {
  const int me = worldRank(), n = worldSize();
  if (n > 3) GTEST_SKIP() << "small collectives travel in one round at 2 and 3 ranks";
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  o.fault.mode = FaultMode::kControl;
  o.fault.schedule = {{0, int(ControlTag::kFingerprint), n - 1, 0}};
  auto comm = makeComm(o);
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t> in = makeInput(DataType::kInt32, ReduceOp::kSum, me, 100);
    ASSERT_TRUE(comm->allreduce(in.data(), in.data(), 100, DataType::kInt32, ReduceOp::kSum).isOk());
    EXPECT_EQ(in, expectedResult(DataType::kInt32, ReduceOp::kSum, n, 100));
  }
  const Counters c = comm->counters();
  EXPECT_EQ(testing::sumOverRanks(c.injected), 1u);
  EXPECT_EQ(testing::sumOverRanks(c.detected), 1u);
  EXPECT_EQ(testing::sumOverRanks(c.retransmitted), 1u);
  EXPECT_EQ(testing::sumOverRanks(c.escaped), 0u);
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

// Frames travel as pieces of kPieceBytes and a shorter last piece: every size around the piece boundaries
// arrives whole and in order, from every peer, to probes of that peer and to probes of any peer, with
// another tag's frames in between.
TEST(MpiControl, FramesOfEverySizeAroundThePieceArriveWholeAndInOrder) {
  const int me = worldRank(), n = worldSize();
  std::unique_ptr<Transport> t;
  ASSERT_TRUE(MpiTransport::create(MPI_COMM_WORLD, &t).isOk());
  ControlChannel* control = t->control();
  constexpr size_t kPiece = MpiControlChannel::kPieceBytes;
  // Sizes of the body; the sealed frame adds its header, so these straddle the boundaries both ways.
  const std::vector<size_t> sizes = {0,
                                     1,
                                     kPiece - 40,
                                     kPiece - 24,
                                     kPiece - 23,
                                     kPiece,
                                     kPiece + 1,
                                     2 * kPiece - 24,
                                     2 * kPiece,
                                     5 * kPiece + 17,
                                     size_t(1) << 20};
  auto body = [](int from, int to, size_t i, size_t bytes) {
    std::vector<uint8_t> b(bytes);
    for (size_t k = 0; k < bytes; ++k) b[k] = uint8_t(k * 31 + i * 7 + size_t(from) * 3 + size_t(to));
    return b;
  };
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> b = body(me, peer, i, sizes[i]);
      ASSERT_TRUE(control->send(peer, ControlTag::kVerdict, b.data(), b.size()).isOk());
      const uint32_t marker = uint32_t(i);
      ASSERT_TRUE(control->send(peer, ControlTag::kFingerprint, &marker, sizeof(marker)).isOk());
    }
  }
  // Verdicts by peer; fingerprints (the markers) from any peer, interleaved with them.
  std::vector<size_t> markers(size_t(n), 0);
  auto takeMarker = [&](bool* took) {
    std::vector<uint8_t> m;
    int from = -1;
    ASSERT_TRUE(control->probe(-1, ControlTag::kFingerprint, &m, &from, took).isOk());
    if (!*took) return;
    ASSERT_EQ(m.size(), sizeof(uint32_t));
    uint32_t marker = 0;
    std::memcpy(&marker, m.data(), sizeof(marker));
    EXPECT_EQ(marker, markers[size_t(from)]) << "markers from rank " << from << " out of order";
    markers[size_t(from)]++;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> got;
      int from = -1;
      bool arrived = false;
      while (!arrived && std::chrono::steady_clock::now() < deadline) {
        ASSERT_TRUE(control->probe(peer, ControlTag::kVerdict, &got, &from, &arrived).isOk());
        bool took = false;
        takeMarker(&took);
      }
      ASSERT_TRUE(arrived) << "frame " << i << " from rank " << peer << " never arrived";
      EXPECT_EQ(from, peer);
      EXPECT_TRUE(got == body(peer, me, i, sizes[i]))
          << "frame " << i << " (" << sizes[i] << " bytes) from rank " << peer << " arrived as " << got.size()
          << " bytes";
    }
  }
  for (bool left = true; left && std::chrono::steady_clock::now() < deadline;) {
    left = false;
    for (int r = 0; r < n; ++r) left = left || (r != me && markers[size_t(r)] < sizes.size());
    bool took = false;
    if (left) takeMarker(&took);
  }
  for (int r = 0; r < n; ++r) {
    if (r != me) EXPECT_EQ(markers[size_t(r)], sizes.size()) << "markers from rank " << r;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A control frame past MPI's eager limit needs its sender's progress to arrive once it is matched. Rank 1
// sends one and stops (SIGSTOP) for kStoppedMs: before, rank 0's probe matched it and sat in MPI_Mrecv
// until rank 1 resumed (one probe call of about kStoppedMs, with no deadline, peer error or abort seen);
// now every probe returns at once and the frame is taken, intact, by a later probe once rank 1 runs again.
TEST(MpiControl, AFrameFromAStoppedSenderNeverBlocksAProbe) {
  constexpr int kStoppedMs = 3000;
  const int me = worldRank();
  std::unique_ptr<Transport> t;
  ASSERT_TRUE(MpiTransport::create(MPI_COMM_WORLD, &t).isOk());
  ControlChannel* control = t->control();
  std::vector<uint8_t> big(size_t(4) << 20);  // 4 MiB: far past any eager limit
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 131 + 7);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) {
    ASSERT_TRUE(control->send(0, ControlTag::kVerdict, big.data(), big.size()).isOk());
    test::stopSelfFor(0, kStoppedMs);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // stopped in here, no MPI call
  } else if (me == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 1 is stopped by now
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    Clock::duration longest{0};
    std::vector<uint8_t> got;
    int from = -1;
    bool arrived = false;
    while (!arrived && Clock::now() - start < std::chrono::seconds(30)) {
      const auto before = Clock::now();
      ASSERT_TRUE(control->probe(1, ControlTag::kVerdict, &got, &from, &arrived).isOk());
      longest = std::max(longest, Clock::now() - before);
      if (!arrived) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto ms = [](Clock::duration d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    ASSERT_TRUE(arrived) << "the frame never arrived";
    EXPECT_EQ(from, 1);
    EXPECT_TRUE(got == big) << "the frame arrived damaged";
    // The frame waited for rank 1 to resume (else this test would prove nothing: a transport that moves
    // large messages without the sender, such as a single-copy one, needs no bound) ...
    EXPECT_GT(ms(Clock::now() - start), kStoppedMs / 2) << "rank 1's stop did not hold the frame back";
    // ... and no probe call waited with it.
    EXPECT_LT(ms(longest), 500) << "one probe call blocked for " << ms(longest) << " ms";
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 1's send completes here, after its resume
  if (me == 1) {
    int ignored = 0;
    while (waitpid(-1, &ignored, 0) > 0) {
    }
  }
}

}  // namespace
}  // namespace ringguard
