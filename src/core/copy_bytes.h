#pragma once
// memcpy for payloads, without a slow case of `rep movsb`: on the AMD EPYC of the dev and CI machines
// (glibc 2.36, which copies from 2112 bytes on with `rep movsb`), a copy whose destination lies 1-63 bytes
// past the source modulo 4096 (4K aliasing: each load seems to depend on the store just before it) ran at
// 1.7 GB/s against 33-40 GB/s for other offsets (bench/bench_host_copy.cc, docs/PERFORMANCE.md, issue 45).
// Two buffers from malloc commonly sit 16 bytes apart modulo a page (its chunk header), and a large
// buffer from malloc starts 16 bytes into a page, so a page-aligned window copied into it is such a copy.
// Those copies take a 16-byte vector loop instead, as fast as memcpy's other cases; the rest is memcpy.
#include <cstddef>

namespace ringguard {

// The bytes of memcpy(dst, src, bytes) (non-overlapping; a null pointer only with bytes == 0).
void copyBytes(void* dst, const void* src, size_t bytes);

// Whether copyBytes takes its own loop for these ends and size (the aliased case above, from 2 KiB on).
bool copyBytesAvoidsMemcpy(const void* dst, const void* src, size_t bytes);

}  // namespace ringguard
