// streamCopy (core/stream_copy.h): the bytes of memcpy at every size around its threshold and every
// alignment of either end (its streaming stores need a 16-byte-aligned destination: a head and a tail of
// ordinary ones), and nothing written past the end.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/stream_copy.h"

namespace ringguard {
namespace {

TEST(StreamCopy, CopiesExactlyTheBytesAtEverySizeAndAlignment) {
  const size_t sizes[] = {0,
                          1,
                          15,
                          4096,
                          kStreamCopyBytes - 1,
                          kStreamCopyBytes,
                          kStreamCopyBytes + 1,
                          kStreamCopyBytes + 63,
                          3 * kStreamCopyBytes + 17};
  std::vector<uint8_t> src(4 * kStreamCopyBytes + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + 7);
  for (size_t bytes : sizes) {
    for (size_t from : {size_t(0), size_t(1), size_t(9)}) {
      for (size_t to : {size_t(0), size_t(3), size_t(16), size_t(33)}) {
        std::vector<uint8_t> dst(bytes + to + 64, 0xEE);
        streamCopy(dst.data() + to, src.data() + from, bytes);
        for (size_t i = 0; i < dst.size(); ++i) {
          const uint8_t want = i >= to && i < to + bytes ? src[from + i - to] : 0xEE;
          ASSERT_EQ(dst[i], want) << "bytes " << bytes << " from +" << from << " to +" << to << " at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringguard
