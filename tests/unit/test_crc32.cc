// Host CRC-32 (ISA-L or zlib) and the header-only combine math, checked against Boost.CRC as an
// independent reference. Every random choice comes from a fixed seed so a failure reproduces.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/crc32_combine.h"
#include "ringguard/core/crc32.h"
#include "verifiable.h"  // randomBytes

#ifdef RINGGUARD_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

namespace ringguard {
namespace {

using testing::randomBytes;

uint32_t boostCrc(const uint8_t* data, size_t len) {
  boost::crc_32_type c;
  c.process_bytes(data, len);
  return c.checksum();
}

// Random cut points in [0, len], sorted, including 0 and len.
std::vector<size_t> randomCuts(size_t len, int pieces, std::mt19937& rng) {
  std::vector<size_t> cuts = {0, len};
  std::uniform_int_distribution<size_t> at(0, len);
  for (int i = 1; i < pieces; ++i) cuts.push_back(at(rng));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

constexpr size_t kMaxSmall = 70000;
constexpr size_t kMaxOffset = 15;

TEST(Crc32Test, KnownVectors) {
  const char* check = "123456789";
  EXPECT_EQ(crc32(check, 9), 0xCBF43926u);
  EXPECT_EQ(crc32(check, 0), 0u);
  EXPECT_EQ(crc32(nullptr, 0), 0u);
  // An empty piece leaves a running CRC unchanged, as in zlib.
  EXPECT_EQ(crc32(check, 0, 0xDEADBEEFu), 0xDEADBEEFu);
  const uint8_t zero = 0;
  EXPECT_EQ(crc32(&zero, 1), 0xD202EF8Du);
}

TEST(Crc32Test, BackendName) {
  const std::string backend = crc32Backend();
  EXPECT_TRUE(backend == "isa-l" || backend == "zlib") << backend;
}

TEST(Crc32Test, MatchesBoostOverSizesAndAlignments) {
  const std::vector<uint8_t> buf = randomBytes(kMaxSmall + kMaxOffset + 1, 1234);
  std::mt19937 rng(42);
  std::uniform_int_distribution<size_t> offsetDist(0, kMaxOffset);
  std::uniform_int_distribution<size_t> sizeDist(0, kMaxSmall);
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 300; ++n) sizes.push_back(n);  // every tail/head case of the SIMD paths
  for (int i = 0; i < 300; ++i) sizes.push_back(sizeDist(rng));
  for (size_t n : sizes) {
    const size_t off = offsetDist(rng);
    EXPECT_EQ(crc32(buf.data() + off, n), boostCrc(buf.data() + off, n)) << "size " << n << " offset " << off;
  }
}

TEST(Crc32Test, MatchesBoostOnMegabytes) {
  const size_t kLen = (size_t(3) << 20) + 7 + kMaxOffset;
  const std::vector<uint8_t> buf = randomBytes(kLen, 77);
  for (size_t off : {size_t(0), size_t(3), size_t(8), kMaxOffset}) {
    for (size_t n : {size_t(1) << 20, (size_t(2) << 20) + 5, kLen - kMaxOffset}) {
      EXPECT_EQ(crc32(buf.data() + off, n), boostCrc(buf.data() + off, n))
          << "size " << n << " offset " << off;
    }
  }
}

TEST(Crc32Test, ChainingInRandomPieces) {
  const std::vector<uint8_t> buf = randomBytes(kMaxSmall + kMaxOffset + 1, 99);
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> sizeDist(0, kMaxSmall);
  std::uniform_int_distribution<int> piecesDist(1, 12);
  std::uniform_int_distribution<size_t> offsetDist(0, kMaxOffset);
  for (int iter = 0; iter < 200; ++iter) {
    const size_t len = sizeDist(rng);
    const uint8_t* base = buf.data() + offsetDist(rng);
    const std::vector<size_t> cuts = randomCuts(len, piecesDist(rng), rng);
    uint32_t running = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      running = crc32(base + cuts[i], cuts[i + 1] - cuts[i], running);
    EXPECT_EQ(running, boostCrc(base, len)) << "iteration " << iter << " length " << len;
  }
}

TEST(Crc32CombineTest, RandomSplitsMatchBoost) {
  const std::vector<uint8_t> buf = randomBytes(kMaxSmall + 1, 2024);
  std::mt19937 rng(11);
  std::uniform_int_distribution<size_t> sizeDist(0, kMaxSmall);
  std::uniform_int_distribution<int> piecesDist(1, 16);
  for (int iter = 0; iter < 200; ++iter) {
    const size_t len = sizeDist(rng);
    const std::vector<size_t> cuts = randomCuts(len, piecesDist(rng), rng);
    uint32_t combined = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const size_t n = cuts[i + 1] - cuts[i];
      combined = crc32Combine(combined, crc32(buf.data() + cuts[i], n), n);
    }
    EXPECT_EQ(combined, boostCrc(buf.data(), len)) << "iteration " << iter << " length " << len;
  }
}

TEST(Crc32CombineTest, EmptyPieces) {
  const uint32_t a = crc32("abc", 3);
  EXPECT_EQ(crc32Combine(a, 0, 0), a);
  EXPECT_EQ(crc32Combine(0, a, 3), a);
}

#ifdef RINGGUARD_TEST_HAVE_ZLIB
TEST(Crc32CombineTest, MatchesZlibCombine) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> lengths = {0,
                                   1,
                                   2,
                                   3,
                                   4,
                                   7,
                                   8,
                                   255,
                                   4096,
                                   uint64_t(1) << 31,
                                   uint64_t(1) << 32,
                                   (uint64_t(1) << 32) + 1,
                                   (uint64_t(1) << 40) + 12345,
                                   uint64_t(INT64_MAX)};
  for (int i = 0; i < 500; ++i) lengths.push_back(rng() >> (rng() % 64));  // all magnitudes
  for (uint64_t len2 : lengths) {
    if (len2 > uint64_t(INT64_MAX)) continue;  // z_off64_t is signed
    const uint32_t crc1 = static_cast<uint32_t>(rng());
    const uint32_t crc2 = static_cast<uint32_t>(rng());
    EXPECT_EQ(crc32Combine(crc1, crc2, len2),
              static_cast<uint32_t>(crc32_combine64(crc1, crc2, static_cast<z_off64_t>(len2))))
        << "len2 " << len2;
  }
}

TEST(Crc32CombineTest, ZlibAgreesOnRealData) {
  const std::vector<uint8_t> buf = randomBytes(kMaxSmall, 314);
  std::mt19937 rng(15);
  std::uniform_int_distribution<size_t> at(0, kMaxSmall);
  for (int iter = 0; iter < 100; ++iter) {
    const size_t split = at(rng);
    const uint32_t a = crc32(buf.data(), split);
    const uint32_t b = crc32(buf.data() + split, kMaxSmall - split);
    EXPECT_EQ(crc32Combine(a, b, kMaxSmall - split),
              static_cast<uint32_t>(crc32_combine(a, b, static_cast<z_off_t>(kMaxSmall - split))));
    EXPECT_EQ(a, static_cast<uint32_t>(::crc32(0, buf.data(), static_cast<uInt>(split))));
  }
}
#endif

TEST(Crc32CombineTest, MultiplyAlgebra) {
  constexpr uint32_t kOne = 1u << 31;  // x^0 in the reflected representation
  std::mt19937 rng(8);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t a = rng(), b = rng(), c = rng();
    EXPECT_EQ(crc32Multiply(kOne, a), a);
    EXPECT_EQ(crc32Multiply(a, kOne), a);
    EXPECT_EQ(crc32Multiply(0, a), 0u);
    EXPECT_EQ(crc32Multiply(a, 0), 0u);
    EXPECT_EQ(crc32Multiply(a, b), crc32Multiply(b, a));
    EXPECT_EQ(crc32Multiply(a, b ^ c), crc32Multiply(a, b) ^ crc32Multiply(a, c));
    EXPECT_EQ(crc32Multiply(crc32Multiply(a, b), c), crc32Multiply(a, crc32Multiply(b, c)));
  }
  EXPECT_EQ(crc32XPow8n(0), kOne);
  // x^(8(m+n)) == x^(8m) * x^(8n), across the 2^32 wrap of the table index too.
  std::mt19937_64 rng64(9);
  for (int i = 0; i < 200; ++i) {
    const uint64_t m = rng64() >> 2, n = rng64() >> 2;
    EXPECT_EQ(crc32XPow8n(m + n), crc32Multiply(crc32XPow8n(m), crc32XPow8n(n)));
  }
}

TEST(Crc32CombineTest, ShiftZerosMatchesCrcOfZeros) {
  const std::vector<uint8_t> zeros(5000, 0);
  std::mt19937 rng(21);
  for (size_t n : {size_t(0), size_t(1), size_t(4), size_t(17), size_t(1000), size_t(5000)}) {
    const uint32_t crc = rng();
    EXPECT_EQ(crc32ShiftZeros(crc, n) ^ crc32(zeros.data(), n), crc32(zeros.data(), n, crc)) << n;
  }
}

TEST(Crc32TableTest, MatchesBoostTable) {
  static_assert(crc32TableEntry(0) == 0u, "");
  static_assert(crc32TableEntry(1) == 0x77073096u, "");
  static_assert(crc32TableEntry(255) == 0x2D02EF8Du, "");
  // With zero init and no final xor, one reflected byte step from a zero register is exactly T[byte].
  for (uint32_t i = 0; i < 256; ++i) {
    boost::crc_optimal<32, 0x04C11DB7, 0, 0, true, true> raw;
    raw.process_byte(static_cast<unsigned char>(i));
    EXPECT_EQ(crc32TableEntry(i), raw.checksum()) << i;
  }
}

// crc32() takes size_t; zlib's crc32 only a 32-bit length. A lazily mapped zero region keeps this cheap
// in memory (every page is the shared zero page); the expected value comes from the combine math only.
TEST(Crc32Test, BeyondFourGiB) {
  if (sizeof(size_t) < 8) GTEST_SKIP() << "32-bit size_t";
  const size_t kTail = 4097;
  const size_t kLen = (size_t(1) << 32) + kTail;
  void* p = mmap(nullptr, kLen, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) GTEST_SKIP() << "cannot map " << kLen << " bytes";
  const std::vector<uint8_t> block(size_t(1) << 20, 0);
  uint32_t expected = crc32(block.data(), block.size());
  for (uint64_t len = block.size(); len < (uint64_t(1) << 32); len *= 2)
    expected = crc32Combine(expected, expected, len);
  expected = crc32Combine(expected, crc32(block.data(), kTail), kTail);
  EXPECT_EQ(crc32(p, kLen), expected);
  munmap(p, kLen);
}

}  // namespace
}  // namespace ringguard
