#include "core/copy_bytes.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ringguard {

size_t copyBytesLoopLimit() {
  static const size_t limit = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? size_t(l2) : size_t(512) << 10;
  }();
  return limit;
}

bool copyBytesAvoidsMemcpy(const void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  const uintptr_t ahead = (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  return bytes > kCopyBytesFrom && bytes < copyBytesLoopLimit() && ahead != 0 && ahead < 32;
#else
  (void)dst, (void)src, (void)bytes;
  return false;
#endif
}

void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#if defined(__x86_64__)
  if (copyBytesAvoidsMemcpy(dst, src, bytes)) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    std::memcpy(d + i, s + i, bytes - i);  // under 64 bytes: memcpy's vector moves, no `rep movsb`
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace ringguard
