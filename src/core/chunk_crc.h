#pragma once
// The CRC-32 of one peer-window chunk as a warp computes it (cuda/peer/peer_device.cuh), header-only so a
// host test runs the same steps lane by lane against Boost.CRC (tests/unit/test_chunk_crc.cc).
//
// A chunk is 32 lanes x kLaneVectors 16-byte pieces; piece i = v * 32 + lane. The chunk's register (zero
// initial value) is the XOR over pieces of piece i's own register shifted past the kPieces - 1 - i pieces
// after it. Every shift here is a multiplication by a fixed power of x, which is linear, so it is four table
// lookups (a byte each) instead of a carry-less multiply loop per piece (the loop was ~200 instructions per
// 16 bytes, and it diverged: each lane had its own multiplier):
//
//   pieceRegister(w)      16 independent lookups (slicing-by-16): the register of one 16-byte piece
//   lane Horner           h = shift(h, 32 pieces) ^ pieceRegister(v) over the lane's pieces v = 0..K-1
//   warp tree             level o = 1, 2, 4, 8, 16: lane l (l % 2o == 0) takes lane l + o's value:
//                         g = shift(g, o pieces) ^ g[l + o]; lane 0 ends with the chunk's register
//   finish(r)             ~(init ^ r), init = the CRC's 0xFFFFFFFF advanced over the whole chunk
#include <cstdint>

#include "core/crc32_combine.h"
#include "core/host_device.h"
#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {
namespace chunk_crc {

inline constexpr int kPieces = 32 * kLaneVectors;
inline constexpr int kTreeLevels = 5;  // log2(32 lanes)

// Multiplication by a fixed polynomial X, a byte at a time: byte[k][b] = X * (b << 8k) mod P.
struct ShiftTable {
  uint32_t byte[4][256];
};

// 16-byte aligned and a whole number of 16-byte vectors: a kernel copies them into shared memory 16 bytes at
// a time (cuda/peer/peer_device.cuh, stageCrcTables).
struct alignas(16) Tables {
  uint32_t slice[16][256];       // slice[j][b]: register after byte b followed by j zero bytes
  ShiftTable lanePieces;         // past 32 pieces (a lane's next piece is 32 pieces later)
  ShiftTable tree[kTreeLevels];  // level t: past 2^t pieces
  uint32_t init;                 // 0xFFFFFFFF advanced over a whole chunk
};

RINGGUARD_HOST_DEVICE constexpr uint32_t xPowBits(uint32_t bits) {
  uint32_t p = 1u << 31;  // x^0
  uint32_t x = 1u << 30;  // x^1, squared as bits are consumed
  for (; bits != 0; bits >>= 1) {
    if (bits & 1u) p = crc32Multiply(p, x);
    x = crc32Multiply(x, x);
  }
  return p;
}

RINGGUARD_HOST_DEVICE constexpr ShiftTable makeShiftTable(uint32_t multiplier) {
  ShiftTable s{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) s.byte[k][b] = crc32Multiply(multiplier, b << (8 * k));
  }
  return s;
}

RINGGUARD_HOST_DEVICE constexpr Tables makeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) t.slice[0][b] = crc32TableEntry(b);
  for (int j = 1; j < 16; ++j) {
    for (uint32_t b = 0; b < 256; ++b)
      t.slice[j][b] = (t.slice[j - 1][b] >> 8) ^ t.slice[0][t.slice[j - 1][b] & 0xffu];
  }
  t.lanePieces = makeShiftTable(xPowBits(128 * 32));
  for (int level = 0; level < kTreeLevels; ++level) t.tree[level] = makeShiftTable(xPowBits(128u << level));
  t.init = crc32Multiply(xPowBits(uint32_t(8 * kChunkBytes)), 0xFFFFFFFFu);
  return t;
}

// `Load` reads a table word: on the device from the block's shared copy, on the host a plain load.
template <typename Load>
RINGGUARD_HOST_DEVICE inline uint32_t shift(const ShiftTable& s, uint32_t r, Load load) {
  return load(&s.byte[0][r & 0xffu]) ^ load(&s.byte[1][(r >> 8) & 0xffu]) ^
         load(&s.byte[2][(r >> 16) & 0xffu]) ^ load(&s.byte[3][r >> 24]);
}

// The zero-initial register of the 16 bytes w[0..3] (little-endian words, byte 0 first).
template <typename Load>
RINGGUARD_HOST_DEVICE inline uint32_t pieceRegister(const Tables& t, const uint32_t (&w)[4], Load load) {
  uint32_t c = 0;
  for (int k = 0; k < 4; ++k) {
    for (int b = 0; b < 4; ++b) c ^= load(&t.slice[15 - (4 * k + b)][(w[k] >> (8 * b)) & 0xffu]);
  }
  return c;
}

// One Horner step of a lane: its register so far moved past 32 pieces, then its next piece's.
template <typename Load>
RINGGUARD_HOST_DEVICE inline uint32_t laneStep(const Tables& t, uint32_t h, uint32_t piece, Load load) {
  return shift(t.lanePieces, h, load) ^ piece;
}

// One tree level: the lower lanes' register moved past the upper ones' 2^level pieces, then theirs.
template <typename Load>
RINGGUARD_HOST_DEVICE inline uint32_t treeStep(const Tables& t, int level, uint32_t lower, uint32_t upper,
                                               Load load) {
  return shift(t.tree[level], lower, load) ^ upper;
}

RINGGUARD_HOST_DEVICE inline uint32_t finish(const Tables& t, uint32_t r) { return ~(t.init ^ r); }

}  // namespace chunk_crc
}  // namespace peer
}  // namespace ringguard
