// bench_host_copy: memcpy against core's copyBytes for a destination at a given distance past the source
// modulo 4096 (issue 45). On the dev/CI machine's AMD EPYC, glibc 2.36's memcpy (`rep movsb` from 2112
// bytes) runs a copy whose destination lies 1-63 bytes past its source modulo a page at ~1.7 GB/s; copyBytes
// takes a vector loop there (core/copy_bytes.h). One process, buffers in cache (warm: the same pair copied
// `--iters` times); GB/s = bytes / time per copy. `--crc` adds the host CRC-32 (core/crc32.h: ISA-L here) of
// the same sizes, the other per-byte cost of a verified copy: the bound of issue 45's 64 KiB figures.
//
//   build/bench/bench_host_copy --sizes 4096,32768,262144 --ahead 0,16,48,64 [--crc]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/copy_bytes.h"
#include "ringguard/core/crc32.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename Copy>
double nsPerCopy(Copy copy, uint8_t* dst, const uint8_t* src, size_t bytes, long iters) {
  for (long i = 0; i < 100; ++i) copy(dst, src, bytes);
  const auto t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    copy(dst, src, bytes);
    asm volatile("" ::: "memory");  // every copy happens: its stores are not dead to the compiler
  }
  return double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()) /
         double(iters);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{4096, 32768, 262144};
  std::vector<size_t> aheads{0, 16, 48, 64};
  size_t from = 16;
  long iters = 0;
  bool crc = false;
  CLI::App app{"bench_host_copy: memcpy against copyBytes by the destination's distance past the source"};
  app.add_option("--sizes", sizes, "bytes per copy")
      ->delimiter(',')
      ->check(CLI::Range(size_t(1), size_t(1) << 30));
  app.add_option("--ahead", aheads, "(dst - src) mod 4096")
      ->delimiter(',')
      ->check(CLI::Range(size_t(0), size_t(4095)));
  app.add_option("--from", from, "the source's offset into its page")
      ->check(CLI::Range(size_t(0), size_t(4095)));
  app.add_option("--iters", iters, "copies per measurement (0: 2e8 bytes' worth)")
      ->check(CLI::Range(0L, 1L << 40));
  app.add_flag("--crc", crc, "also time the host CRC-32 of each size");
  CLI11_PARSE(app, argc, argv);

  size_t largest = 0;
  for (size_t s : sizes) largest = std::max(largest, s);
  const size_t span =
      (largest + 2 * 4096 + 4095) / 4096 * 4096;  // aligned_alloc: a multiple of the alignment
  std::unique_ptr<uint8_t, decltype(&std::free)> a(static_cast<uint8_t*>(std::aligned_alloc(4096, span)),
                                                   &std::free);
  std::unique_ptr<uint8_t, decltype(&std::free)> b(static_cast<uint8_t*>(std::aligned_alloc(4096, span)),
                                                   &std::free);
  if (!a || !b) {
    std::fprintf(stderr, "bench_host_copy: aligned_alloc of %zu bytes failed\n", span);
    return 1;
  }
  std::memset(a.get(), 1, span);
  std::memset(b.get(), 2, span);
  auto libc = [](uint8_t* d, const uint8_t* s, size_t n) { std::memcpy(d, s, n); };
  auto ours = [](uint8_t* d, const uint8_t* s, size_t n) { ringguard::copyBytes(d, s, n); };
  std::printf("# bench_host_copy: source at +%zu in its page; ahead = (dst - src) mod 4096\n", from);
  std::printf("%10s %6s | %10s %8s | %10s %8s | %s\n", "bytes", "ahead", "memcpy_ns", "GB/s", "copyB_ns",
              "GB/s", "copyBytes' own loop");
  for (size_t bytes : sizes) {
    const long n = iters > 0 ? iters : std::max(100L, long(200000000 / (bytes + 256)));
    for (size_t ahead : aheads) {
      const uint8_t* src = a.get() + from;
      uint8_t* dst = b.get() + (from + ahead) % 4096;
      const double m = nsPerCopy(libc, dst, src, bytes, n), c = nsPerCopy(ours, dst, src, bytes, n);
      std::printf("%10zu %6zu | %10.0f %8.1f | %10.0f %8.1f | %s\n", bytes, ahead, m, double(bytes) / m, c,
                  double(bytes) / c, ringguard::copyBytesAvoidsMemcpy(dst, src, bytes) ? "yes" : "no");
    }
  }
  if (crc) {
    std::printf("# host CRC-32 (%s) of the source, warm\n%10s | %10s %8s\n", ringguard::crc32Backend(),
                "bytes", "crc_ns", "GB/s");
    volatile uint32_t sink = 0;
    auto checksum = [&sink](uint8_t*, const uint8_t* s, size_t n) { sink = ringguard::crc32(s, n); };
    for (size_t bytes : sizes) {
      const long n = iters > 0 ? iters : std::max(100L, long(200000000 / (bytes + 256)));
      const double c = nsPerCopy(checksum, nullptr, a.get() + from, bytes, n);
      std::printf("%10zu | %10.0f %8.1f\n", bytes, c, double(bytes) / c);
    }
  }
  return 0;
}
