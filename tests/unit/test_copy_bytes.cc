// copyBytes (core/copy_bytes.h): the bytes of memcpy at sizes around its bounds (kCopyBytesFrom, the L2's
// size), for destinations at every kind of distance from the source modulo a page (the aliased 1-31 bytes
// ahead that take its own loop, and the others that take memcpy), nothing written outside the destination,
// and nothing done for 0 bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/copy_bytes.h"

namespace ringguard {
namespace {

TEST(CopyBytes, CopiesExactlyTheBytesAtEverySizeAndDistance) {
  const size_t limit = copyBytesLoopLimit();
  ASSERT_GE(limit, size_t(4096));
  const size_t sizes[] = {0,        1,          63,        64,   65, kCopyBytesFrom, kCopyBytesFrom + 1,
                          4096 + 5, 32768 + 37, limit - 1, limit};
  const size_t aheads[] = {0, 1, 15, 16, 31, 32, 33, 63, 64, 65, 2048, 4095, 4096 + 16};
  std::vector<uint8_t> src(limit + 4096);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + 7);
  for (size_t bytes : sizes) {
    for (size_t from : {size_t(0), size_t(16), size_t(40)}) {
      for (size_t ahead : aheads) {
        // The destination sits `ahead` bytes past the source modulo 4096: one page-aligned base for both.
        std::vector<uint8_t> dst(bytes + 2 * 4096 + 64, 0xEE);
        const uintptr_t s = reinterpret_cast<uintptr_t>(src.data() + from);
        const uintptr_t base = (reinterpret_cast<uintptr_t>(dst.data()) + 4095) & ~uintptr_t(4095);
        uint8_t* to = reinterpret_cast<uint8_t*>(base + ((s + ahead) & 4095));
#if defined(__x86_64__)
        const bool own =
            bytes > kCopyBytesFrom && bytes < limit && (ahead & 4095) != 0 && (ahead & 4095) < 32;
        EXPECT_EQ(copyBytesAvoidsMemcpy(to, src.data() + from, bytes), own)
            << bytes << " bytes, " << ahead << " ahead";
#endif
        copyBytes(to, src.data() + from, bytes);
        const size_t at = size_t(to - dst.data());
        for (size_t i = 0; i < dst.size(); ++i) {
          const uint8_t want = i >= at && i < at + bytes ? src[from + i - at] : 0xEE;
          ASSERT_EQ(dst[i], want) << bytes << " bytes from +" << from << ", " << ahead << " ahead, at " << i;
        }
      }
    }
  }
}

TEST(CopyBytes, NothingForZeroBytesEvenFromNull) {
  copyBytes(nullptr, nullptr, 0);  // an empty message's buffers may be null
  uint8_t byte = 7;
  copyBytes(&byte, nullptr, 0);
  EXPECT_EQ(byte, 7);
}

}  // namespace
}  // namespace ringguard
