#pragma once
// memcpy for payloads, without a slow case of `rep movsb`: on the AMD EPYC of the dev and CI machines,
// glibc 2.36 copies from 2112 bytes up to the L2's size (512 KiB there; a vector loop above it) with `rep
// movsb`, which runs a copy whose destination lies 1-31 bytes past its source modulo 4096 (4K aliasing) at
// 1.8-2.9 GB/s against 30-45 GB/s for other distances (bench/bench_host_copy.cc; docs/PERFORMANCE.md,
// issue 45). Two buffers from malloc commonly sit 16 bytes apart modulo a page (its chunk header), and a
// large buffer from malloc starts 16 bytes into a page, so a page-aligned window copied into it is such a
// copy. Those copies (1-31 bytes ahead, above 2112 bytes and below the L2's size) take a 16-byte vector loop
// instead; the rest is memcpy (at other distances as fast as the loop or faster).
#include <cstddef>

namespace ringguard {

// The bytes of memcpy(dst, src, bytes) (non-overlapping; a null pointer only with bytes == 0).
void copyBytes(void* dst, const void* src, size_t bytes);

// glibc's x86_rep_movsb_threshold on the dev/CI machine: memcpy uses `rep movsb` above it.
inline constexpr size_t kCopyBytesFrom = 2112;

// Whether copyBytes takes its own loop for these ends and size (the aliased case above).
bool copyBytesAvoidsMemcpy(const void* dst, const void* src, size_t bytes);

// The size from which copyBytes leaves every copy to memcpy: the L2's size (sysconf), 512 KiB where unknown.
size_t copyBytesLoopLimit();

}  // namespace ringguard
