// The warp's chunk CRC (core/chunk_crc.h, run by cuda/peer/peer_device.cuh) computed here lane by lane, as
// the 32 lanes of a warp do it, against Boost.CRC: the table algebra is checked on every machine, the
// kernels' use of it on the GPU (PeerAllreduce.ChunkCrcIsTheHostCrc).
#include <gtest/gtest.h>

#include <array>
#include <boost/crc.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/chunk_crc.h"

namespace ringguard {
namespace peer {
namespace {

const chunk_crc::Tables& tables() {
  static const chunk_crc::Tables t = chunk_crc::makeTables();
  return t;
}

// What warpChunkCrc computes: lane l's Horner over its pieces v * 32 + l, then the tree over the lanes
// (shfl_down: a lane past 31 reads its own value).
uint32_t warpCrc(const uint8_t* chunk) {
  const chunk_crc::Tables& t = tables();
  const auto load = [](const uint32_t* p) { return *p; };
  std::array<uint32_t, 32> h{};
  for (int lane = 0; lane < 32; ++lane) {
    for (int v = 0; v < kLaneVectors; ++v) {
      uint32_t w[4];
      std::memcpy(w, chunk + (size_t(v) * 32 + lane) * 16, 16);
      const uint32_t piece = chunk_crc::pieceRegister(t, w, load);
      h[lane] = v == 0 ? piece : chunk_crc::laneStep(t, h[lane], piece, load);
    }
  }
  for (int level = 0; level < chunk_crc::kTreeLevels; ++level) {
    std::array<uint32_t, 32> next{};
    for (int lane = 0; lane < 32; ++lane) {
      const int from = lane + (1 << level);
      next[lane] = chunk_crc::treeStep(t, level, h[lane], h[from < 32 ? from : lane], load);
    }
    h = next;
  }
  return chunk_crc::finish(t, h[0]);
}

uint32_t boostCrc(const uint8_t* data, size_t len) {
  boost::crc_32_type c;
  c.process_bytes(data, len);
  return c.checksum();
}

TEST(ChunkCrc, WarpStepsMatchBoostOnRandomChunks) {
  std::mt19937 gen(11);
  std::vector<uint8_t> chunk(kChunkBytes);
  for (int trial = 0; trial < 200; ++trial) {
    for (uint8_t& b : chunk) b = uint8_t(gen());
    ASSERT_EQ(warpCrc(chunk.data()), boostCrc(chunk.data(), chunk.size())) << "trial " << trial;
  }
}

// One bit anywhere changes the CRC, and every piece's position counts (a wrong shift for one lane or level
// would still pass on a chunk whose other pieces are zero only by chance).
TEST(ChunkCrc, EveryPieceAndBitPositionMatchesBoost) {
  std::vector<uint8_t> chunk(kChunkBytes, 0);
  const uint32_t zero = boostCrc(chunk.data(), chunk.size());
  ASSERT_EQ(warpCrc(chunk.data()), zero);
  for (size_t byte = 0; byte < kChunkBytes; byte += 7) {
    chunk[byte] = uint8_t(1u << (byte % 8));
    const uint32_t want = boostCrc(chunk.data(), chunk.size());
    ASSERT_NE(want, zero);
    ASSERT_EQ(warpCrc(chunk.data()), want) << "byte " << byte;
    chunk[byte] = 0;
  }
}

TEST(ChunkCrc, PowersOfX) {
  EXPECT_EQ(chunk_crc::xPowBits(0), 1u << 31);
  EXPECT_EQ(chunk_crc::xPowBits(1), 1u << 30);
  EXPECT_EQ(chunk_crc::xPowBits(31), 1u);
  EXPECT_EQ(chunk_crc::xPowBits(32), crc32XPow8n(4));
  EXPECT_EQ(chunk_crc::xPowBits(8 * 1000), crc32XPow8n(1000));
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
